"""Demonstrations for the Mario agents' DQfD pre-training: the search-based DFS's reference trace, run in process.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Algorithm 1 (generator_service's
depth_first_search), over the Mario backend itself instead of a simulator session: the same subject declaration
(its `search` section: actions, initial test case, seed, x/y abstraction, flag goal, lost-life unsafe), the same
snapshots (a deepcopy of the env is its action history, docs/subjects/mario.md). The stored document is the
generator's reference artifact (gauntlet.search_reference.v1), so the suites could read it too; the training
(offline/mario_dqn.py) replays its actions to record the demonstration transitions.

Runs inside .venv-mario::

    .venv-mario/bin/python -m offline.mario_demos --subject mario_1_1 --out runs/mario-demos/mario_1_1.json
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

from generator_service.search_based.artifact import reference_document, write_reference
from generator_service.search_based.dfs import ENDED, GOAL, ONGOING, UNSAFE, Visit, depth_first_search
from simulator_service.api import load_subjects, make_env

KINDS = {1: ONGOING, 2: GOAL, 3: UNSAFE, 4: ENDED}  # simulator_pb2.StateKind values


class LocalSearchEnvironment:
    """The DFS's SearchEnvironment on an in-process env: each ongoing state is kept as a deepcopy (a snapshot)."""

    def __init__(self, subject_name: str) -> None:
        self.subject = load_subjects()[subject_name]
        if self.subject.search is None:
            raise SystemExit(f"subject {subject_name} declares no `search` section")
        self.spec = self.subject.search
        self.env: Any = make_env(self.subject)

    def _visit(self, obs: Any, reward: float, terminated: bool, truncated: bool) -> Visit:
        key = tuple(float(x) for x in self.spec.abstract(self.env, obs).reshape(-1))
        kind = KINDS.get(int(self.spec.kind(self.env, obs, terminated, truncated)), ENDED)
        handle = copy.deepcopy(self.env) if kind == ONGOING else None
        return Visit(key, kind, reward, handle)

    def root(self) -> Visit:
        obs, _ = self.env.reset(seed=self.spec.seed, options={"values": dict(self.spec.initial)})
        return self._visit(obs, 0.0, False, False)

    def sample(self, state: Visit, action: int) -> Visit:
        self.env.close()
        self.env = copy.deepcopy(state.handle)
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return self._visit(obs, float(reward), bool(terminated), bool(truncated))


def search(subject_name: str, max_samples: int) -> dict[str, Any]:
    """The DFS on `subject_name` from its declared initial state; the reference document (success or not)."""
    env = LocalSearchEnvironment(subject_name)
    spec = env.spec
    result = depth_first_search(env, list(spec.actions), spec.repetitions, max_samples=max_samples)
    agent_actions = int(env.env.action_space.n)
    return reference_document(result, subject_name, dict(spec.initial), spec.seed, list(spec.actions), agent_actions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", required=True, help="a Mario subject with a `search` section")
    parser.add_argument("--out", type=Path, required=True, help="where the reference document goes (JSON)")
    parser.add_argument("--max-samples", type=int, default=20_000, help="DFS budget in sampled transitions")
    args = parser.parse_args()
    document = search(args.subject, args.max_samples)
    write_reference(args.out, document)
    print(
        json.dumps(
            {
                "success": document["success"],
                "length": len(document["reference_actions"]),
                "boundary": len(document["boundary"]),
                **document["stats"],
            }
        )
    )


if __name__ == "__main__":
    main()
