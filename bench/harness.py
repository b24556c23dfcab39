"""Campaign helpers that benches and replications share: run a campaign through the generator service to its end
and list its executions.

Every function talks to a running suite (cli.launcher.LocalSuite) over gRPC, as a user's client would.
Add functions here; do not change the signature of one another bench or replication uses.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from generator_service.api import CampaignConfig

# One BLAS/OpenMP thread per process, no GPU: a bench's processes then compete for cores only as its rows intend
PINNED_ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
}

# CartPole cut to one step per episode: the campaign loop's own cost dominates (first_execution, campaign_overhead)
ONE_STEP_CARTPOLE = """
subject: cartpole_1step
description: CartPole-v1 cut to one step per episode (the benches' one-step subject).
backend: gymnasium
env_id: CartPole-v1
max_steps: 1
deterministic: true
injector: {kind: state_vector, attribute: state}
oracle: cartpole_balance
parameters:
  - {name: x, low: -0.9, high: 0.9}
  - {name: x_dot, low: -0.3, high: 0.3}
  - {name: theta, low: -pi/60, high: pi/60}
  - {name: theta_dot, low: -pi/90, high: pi/90}
"""


def run_campaign(gen: generator_pb2_grpc.GeneratorServiceStub, config: CampaignConfig) -> generator_pb2.CampaignStatus:
    """Starts the campaign and blocks until it ends; returns its final status (raises on an error stop)."""
    cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status.campaign_id
    status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
    if status.stop_reason == "error":
        raise RuntimeError(f"campaign {config.name} ({cid}) stopped on an error: {status.error}")
    return status


def campaign_executions(
    gen: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str
) -> list[generator_pb2.Execution]:
    """The campaign's executions in asking order (index), invalid ones included."""
    rows = [
        r.execution
        for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=campaign_id), timeout=600)
    ]
    return sorted(rows, key=lambda e: e.index)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds so far of these processes and all their descendants (fields 14-17 of
    /proc/<pid>/stat: their own threads and their reaped children), summed: what a suite of processes costs."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # a process that ended while the table was read
            continue
    tree, frontier = set(pids), list(pids)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    total = 0
    for pid in tree:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime (after the state field)
    return total / tick


def unpinned(pid: int) -> list[str]:
    """The PINNED_ENVIRONMENT variables that process `pid` did not start with (empty: all pinned)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    seen = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
    return [name for name, value in PINNED_ENVIRONMENT.items() if seen.get(name) != value]
