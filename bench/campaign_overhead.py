"""Per-execution overhead of a long campaign: does the generator's bookkeeping stay flat as the store grows?

Runs one 100,000-execution campaign (strategy random) through the real services, each a separate process on
loopback (cli.launcher.LocalSuite, SQLite store in a scratch folder), on a subject made cheap on purpose:
CartPole with a one-step horizon (a subject file with max_steps: 1 on GAUNTLET_SUBJECT_PATH), so each execution
costs one reset, one batched agent action and one step, and what is left is the campaign's own work: asking,
storing, stop checks, judging and progress events. A watcher is attached the whole time, as `gauntlet run` does.

Measured: wall time per execution over two windows of 1,000 executions, read from each execution's stored
elapsed_seconds (campaign wall time when it was judged): executions 1,001-2,000 (the first thousand after a
warm-up thousand that loads the model) and 99,001-100,000. Each window spans whole batches, so it includes
the per-batch work between batches. A stop check or progress event that aggregated the whole store would make
the second number grow with the store (it did: every check was a scan over all stored executions).

Prints exactly one line:
    campaign_overhead: per_execution_us_at_1k=<a> per_execution_us_at_100k=<b>
(b: the last thousand, whatever --executions is) and exits 1 if b > 1.2 a; writes both to
results/bench/campaign_overhead.json, before the check. Takes a few minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import ONE_STEP_CARTPOLE, campaign_executions, run_campaign
from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2_grpc
from common.server import client_channel
from generator_service.api import CampaignConfig

BATCH = 500  # divides 1,000: both windows start and end on batch boundaries


def window_us(end_seconds: dict[int, float], first: int, last: int) -> float:
    """Mean wall microseconds per execution for executions first..last (1-based, whole batches)."""
    start = end_seconds[(first - 1) // BATCH]  # end of the batch before the window
    end = end_seconds[(last - 1) // BATCH + 1]
    return (end - start) / (last - first + 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executions", type=int, default=100_000, help="campaign length (default 100,000)")
    args = parser.parse_args()
    n = args.executions
    if n < 2_000 or n % BATCH:
        raise SystemExit(f"error: --executions must be a multiple of {BATCH} and at least 2000, got {n}")
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
                status = run_campaign(gen, config)
                if status.executions != n:
                    raise SystemExit(f"error: the campaign stored {status.executions} executions, not {n}")
                rows = campaign_executions(gen, status.campaign_id)
        end_seconds = {0: 0.0}
        for e in rows:
            batch = (e.index - 1) // BATCH + 1
            end_seconds[batch] = max(end_seconds.get(batch, 0.0), e.elapsed_seconds)
        a = window_us(end_seconds, 1_001, 2_000)
        b = window_us(end_seconds, n - 999, n)
        print(f"campaign_overhead: per_execution_us_at_1k={a:.1f} per_execution_us_at_100k={b:.1f}", flush=True)
        record.metrics.update(executions=n, per_execution_us_at_1k=round(a, 1), per_execution_us_at_100k=round(b, 1))
    if b > 1.2 * a:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
