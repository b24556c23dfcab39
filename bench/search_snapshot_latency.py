"""Snapshot + restore latency per subject with a `search` section: what one DFS sample pays to go back to a state.

Search-based testing of RL ("Search-Based Testing of Reinforcement Learning", IJCAI-ECAI 2022) samples a state's
successors by going back to it. Per subject, side by side in one run, after `--depth` steps from the search start:

* deepcopy: the simulator's snapshot (copy.deepcopy of the environment) and restore (another deepcopy), in process;
* session: one snapshot and one restore round trip through a running simulator's OpenSession (what the DFS pays);
* replay: reset + replay of the `--depth`-step prefix in process (what a subject that cannot snapshot pays).

None of these subjects has a native snapshot (a simulator's own state save, like the NES RAM backup of Super Mario
Bros.): the line says so. Ratios are printed beside the times, since timings on a shared machine are noisy. Every
number printed goes to results/bench/search_snapshot_latency.json.

    python bench/search_snapshot_latency.py --subjects taxi_large cartpole lunarlander
"""

from __future__ import annotations

import argparse
import copy
import queue
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc
from common.server import client_channel
from common.tensor import to_tensor
from simulator_service.api import load_subjects, make_env


def _timed(fn: object, repeats: int) -> float:
    """Median seconds of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def in_process(subject_name: str, depth: int, repeats: int) -> dict[str, float | str]:
    subject = load_subjects()[subject_name]
    search = subject.search
    if search is None:
        raise SystemExit(f"{subject_name} declares no search section")
    prefix = [search.actions[i % 2] for i in range(depth)]  # the first two search actions, alternating
    env = make_env(subject)

    def replay() -> None:
        env.reset(seed=search.seed, options={"values": dict(search.initial)})
        for a in prefix:
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:  # the replay stops where the episode does
                break

    out: dict[str, float | str] = {"replay_s": _timed(replay, repeats)}
    try:
        replay()
        out["deepcopy_s"] = _timed(lambda: copy.deepcopy(copy.deepcopy(env)), repeats)
    except Exception as exc:  # noqa: BLE001 - e.g. Box2D worlds cannot be copied
        out["deepcopy_s"] = f"cannot ({type(exc).__name__})"
    env.close()
    return out


def through_session(stub: simulator_pb2_grpc.SimulatorServiceStub, subject: str, depth: int, repeats: int) -> float:
    """Median seconds of a snapshot + restore pair of round trips in one OpenSession (nan: cannot snapshot)."""
    info = stub.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject), timeout=60)
    if not info.search.snapshot:
        return float("nan")
    outbox: queue.Queue[simulator_pb2.OpenSessionRequest | None] = queue.Queue()
    replies = stub.OpenSession(iter(outbox.get, None), timeout=600)

    def call(request: simulator_pb2.OpenSessionRequest) -> simulator_pb2.OpenSessionResponse:
        outbox.put(request)
        return next(replies)

    case = common_pb2.TestCase(id="latency")
    for name, value in info.search.initial.items():
        case.values[name].CopyFrom(value)
    actions = list(info.search.actions)
    opened = simulator_pb2.SessionOpen(subject=subject, test_case=case, seed=info.search.seed)
    call(simulator_pb2.OpenSessionRequest(open=opened))
    for i in range(depth):
        step = simulator_pb2.SessionStep(action=to_tensor(np.asarray(actions[i % 2], dtype=np.int64)))
        reply = call(simulator_pb2.OpenSessionRequest(step=step))
        if reply.terminated or reply.truncated:
            break

    def pair() -> None:
        snap = call(simulator_pb2.OpenSessionRequest(snapshot=simulator_pb2.SessionSnapshot()))
        call(simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id=snap.snapshot_id)))

    seconds = _timed(pair, repeats)
    outbox.put(None)
    for _ in replies:
        pass
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subjects", nargs="+", default=["taxi_large", "cartpole", "lunarlander"])
    parser.add_argument("--depth", type=int, default=50, help="steps from the search start before measuring")
    parser.add_argument("--repeats", type=int, default=200, help="timed repetitions (the median is reported)")
    args = parser.parse_args(argv)
    with BenchRecord("search_snapshot_latency") as record:
        m = record.metrics
        m.update(depth=args.depth, repeats=args.repeats)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            with LocalSuite(
                store_url=f"sqlite:///{root / 'store.db'}",
                log_dir=root / "logs",
                report_root=root / "reports",
                artifact_root=root / "artifacts",
            ) as local:
                stub = simulator_pb2_grpc.SimulatorServiceStub(client_channel(local.endpoint("simulator")))
                for subject in args.subjects:
                    measured = in_process(subject, args.depth, args.repeats)
                    session = through_session(stub, subject, args.depth, args.repeats)
                    copy_s, replay_s = measured["deepcopy_s"], float(measured["replay_s"])
                    copy_text = f"{copy_s * 1e6:.0f}us" if isinstance(copy_s, float) else copy_s
                    ratio = f" replay/deepcopy={replay_s / copy_s:.1f}" if isinstance(copy_s, float) else ""
                    session_text = "n/a (replay subject)" if np.isnan(session) else f"{session * 1e6:.0f}us"
                    m[f"{subject}_replay_us"] = round(replay_s * 1e6)
                    if isinstance(copy_s, float):
                        m[f"{subject}_deepcopy_snapshot_restore_us"] = round(copy_s * 1e6)
                        m[f"{subject}_replay_over_deepcopy"] = round(replay_s / copy_s, 1)
                    if not np.isnan(session):
                        m[f"{subject}_session_snapshot_restore_us"] = round(session * 1e6)
                    print(
                        f"subject={subject} depth={args.depth} deepcopy_snapshot_restore={copy_text} "
                        f"session_snapshot_restore={session_text} replay={replay_s * 1e6:.0f}us{ratio} native=none"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
