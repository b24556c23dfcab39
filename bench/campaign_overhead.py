"""Per-execution overhead of a long campaign: does the generator's bookkeeping stay flat as the store grows?

Runs one 100,000-execution campaign (strategy random) through the real services, each a separate process on
loopback (cli.launcher.LocalSuite, SQLite store in a scratch folder), on a subject made cheap on purpose:
CartPole with a one-step horizon (a subject file with max_steps: 1 on GAUNTLET_SUBJECT_PATH), so each execution
costs one reset, one batched agent action and one step, and what is left is the campaign's own work: asking,
storing, stop checks, judging and progress events. A watcher is attached the whole time, as `gauntlet run` does.

Measured in a window at the start and one at the end of the campaign. A stop check or progress event that
aggregated the whole store would make the end cost more than the start (it did: every check was a scan over all
stored executions).

- wall time per execution over executions 1,001-2,000 (the first thousand after a warm-up thousand that loads the
  model) and 99,001-100,000, read from each execution's stored elapsed_seconds (campaign wall time when it was
  judged); each window spans whole batches, so it includes the per-batch work between batches. On a machine
  others share, it follows the load average as much as the store (see the results file's load averages).
- CPU time per execution, of the whole suite (every service process and its children) and of the generator (the
  store's owner) alone, over executions 1,001-5,000 and 95,001-99,000: at the first progress event past each
  window end, the campaign's executions (GetCampaign, counted in memory) and the CPU seconds so far (/proc),
  differenced. It does not depend on how many cores other processes take. The windows are 4,000 wide so that
  the 10 ms CPU tick and the few executions stored between GetCampaign and the /proc read weigh little, and the
  end window stops a thousand executions short of the end, so the campaign's closing work (its final status,
  counted by the store) is in neither. The CPU every 10,000 executions is in the results file's details.

Prints exactly one line:
    campaign_overhead: per_execution_us_at_1k=<a> per_execution_us_at_100k=<b> suite_cpu_ratio=<c> \
generator_cpu_ratio=<d>
(b: the last thousand, whatever --executions is; c, d: CPU per execution in the end window over the start one) and
exits 1 if c or d is above 1.2 (the wall ratio b / a is reported, not checked: it measures the machine's load too);
writes every number to results/bench/campaign_overhead.json, before the check. Takes a few minutes on a loaded
2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import ONE_STEP_CARTPOLE, campaign_executions, cpu_seconds
from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.api import CampaignConfig

BATCH = 500  # divides 1,000: both windows start and end on batch boundaries
FLAT = 1.2  # the end window may cost at most this many times the start one, per execution
CPU_WINDOW = 4_000  # executions in each CPU window
CURVE_EVERY = 10_000  # the CPU so far is also sampled every this many executions (results file details)


def window_us(end_seconds: dict[int, float], first: int, last: int) -> float:
    """Mean wall microseconds per execution for executions first..last (1-based, whole batches)."""
    start = end_seconds[(first - 1) // BATCH]  # end of the batch before the window
    end = end_seconds[(last - 1) // BATCH + 1]
    return (end - start) / (last - first + 1) * 1e6


def watched_run(
    gen: generator_pb2_grpc.GeneratorServiceStub,
    config: CampaignConfig,
    suite_pids: list[int],
    generator_pid: int,
    marks: list[int],
) -> tuple[generator_pb2.CampaignStatus, dict[int, tuple[int, float, float]]]:
    """Runs the campaign to its end, watching it; at the first progress event at or past each mark (an execution
    count): (executions now, suite CPU seconds so far, generator CPU seconds so far). The executions are asked
    right before the CPU is read: an event may reach this client some batches after the generator sent it."""
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status
    request = generator_pb2.GetCampaignRequest(campaign_id=started.campaign_id)
    pending, samples = sorted(set(marks)), {}
    status = started
    for event in gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id)):
        status = event.status
        if pending and status.executions >= pending[0]:
            now = gen.GetCampaign(request, timeout=60).status.executions
            sample = (now, cpu_seconds(suite_pids), cpu_seconds([generator_pid]))
            while pending and status.executions >= pending[0]:
                samples[pending.pop(0)] = sample
    if status.stop_reason == "error":
        raise SystemExit(f"error: the campaign stopped on an error: {status.error}")
    return status, samples


def cpu_us(samples: dict[int, tuple[int, float, float]], first: int, last: int, which: int) -> float:
    """CPU microseconds per execution between the samples at marks `first` and `last` (which: 1 suite, 2 generator)."""
    done = samples[last][0] - samples[first][0]
    if done <= 0:
        raise SystemExit(f"error: no progress event between executions {first} and {last}: cannot measure CPU")
    return (samples[last][which] - samples[first][which]) / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executions", type=int, default=100_000, help="campaign length (default 100,000)")
    args = parser.parse_args()
    n = args.executions
    if n < 10_000 or n % BATCH:
        raise SystemExit(f"error: --executions must be a multiple of {BATCH} and at least 10000, got {n}")
    with BenchRecord("campaign_overhead") as record:
        with tempfile.TemporaryDirectory(prefix="gauntlet-overhead-") as scratch:
            root = Path(scratch)
            (root / "subjects").mkdir()
            (root / "subjects" / "cartpole_1step.yaml").write_text(ONE_STEP_CARTPOLE)
            os.environ["GAUNTLET_SUBJECT_PATH"] = str(root / "subjects")  # the simulator process inherits it
            with LocalSuite(store_url=f"sqlite:///{root / 'store.db'}", log_dir=root / "logs") as suite:
                gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
                config = CampaignConfig(
                    name="overhead",
                    subject="cartpole_1step",
                    model="cartpole-ppo",
                    strategy="random",
                    budget={"max_executions": n},
                    batch_size=BATCH,
                    parallelism=512,
                )
                pids = [s.process.pid for s in suite.services.values()]
                start, end = (1_000, 1_000 + CPU_WINDOW), (n - 1_000 - CPU_WINDOW, n - 1_000)
                marks = [*start, *end, *range(CURVE_EVERY, n, CURVE_EVERY)]
                status, samples = watched_run(gen, config, pids, suite.services["generator"].process.pid, marks)
                if status.executions != n:
                    raise SystemExit(f"error: the campaign stored {status.executions} executions, not {n}")
                rows = campaign_executions(gen, status.campaign_id)
        end_seconds = {0: 0.0}
        for e in rows:
            batch = (e.index - 1) // BATCH + 1
            end_seconds[batch] = max(end_seconds.get(batch, 0.0), e.elapsed_seconds)
        a = window_us(end_seconds, 1_001, 2_000)
        b = window_us(end_seconds, n - 999, n)
        cpu = {
            f"{who}_cpu_us_per_execution_{at}": round(cpu_us(samples, first, last, which), 1)
            for which, who in ((1, "suite"), (2, "generator"))
            for at, (first, last) in (("start", start), ("end", end))
        }
        suite_ratio = cpu["suite_cpu_us_per_execution_end"] / cpu["suite_cpu_us_per_execution_start"]
        generator_ratio = cpu["generator_cpu_us_per_execution_end"] / cpu["generator_cpu_us_per_execution_start"]
        print(
            f"campaign_overhead: per_execution_us_at_1k={a:.1f} per_execution_us_at_100k={b:.1f} "
            f"suite_cpu_ratio={suite_ratio:.2f} generator_cpu_ratio={generator_ratio:.2f}",
            flush=True,
        )
        record.metrics.update(executions=n, per_execution_us_at_1k=round(a, 1), per_execution_us_at_100k=round(b, 1))
        record.metrics.update(cpu, suite_cpu_ratio=round(suite_ratio, 3), generator_cpu_ratio=round(generator_ratio, 3))
        record.details = {
            "cpu_windows": {"start": list(start), "end": list(end)},
            # mark -> [executions when read, suite CPU s, generator CPU s]
            "cpu_samples": {str(mark): list(sample) for mark, sample in sorted(samples.items())},
        }
    if suite_ratio > FLAT or generator_ratio > FLAT:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
