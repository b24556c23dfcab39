"""Demonstrations for the Mario agents' DQfD pre-training: the search-based DFS's reference trace, run in process.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Algorithm 1 (generator_service's
depth_first_search), over the Mario backend itself instead of a simulator session: the same subject declaration
(its `search` section: actions, initial test case, seed, x/y abstraction, flag goal, lost-life unsafe), the same
snapshots (a deepcopy of the env is its action history, docs/subjects/mario.md). The stored document is the
generator's reference artifact (gauntlet.search_reference.v1), so the suites could read it too; the training
(offline/mario_dqn.py) replays its actions to record the demonstration transitions.

Runs inside .venv-mario::

    .venv-mario/bin/python -m offline.mario_demos --subject mario_1_1 --out runs/mario-demos/mario_1_1.json

``--action-order 1,0`` tries the search actions in another order than the subject declares (a permutation of its
`search.actions`): the DFS then finds another goal trace and its own boundary states. The order used is what the
document's ``search_actions`` records. ``--initial noop_frames=30`` starts it from another initial test case (values
of the subject's declared `search.initial` parameters): the level's enemies are elsewhere when Mario starts, so the
trace differs too; the document's ``initial`` records it. ``--printed-visited-rule`` never explores a visited
state again (the paper's printed rule; default: again when a shorter prefix reaches it), ``--reference-rule shortest``
makes τ_ref the shortest goal trace (generator_service's shortest_reference_search); the document's ``stats`` record
both (``visited_rule``, ``reference_rule``).
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

from generator_service.search_based.artifact import reference_document, write_reference
from generator_service.search_based.dfs import (
    ENDED,
    GOAL,
    ONGOING,
    UNSAFE,
    Visit,
    depth_first_search,
    shortest_reference_search,
)
from simulator_service.api import load_subjects, make_env

KINDS = {1: ONGOING, 2: GOAL, 3: UNSAFE, 4: ENDED}  # simulator_pb2.StateKind values


class LocalSearchEnvironment:
    """The DFS's SearchEnvironment on an in-process env: each ongoing state is kept as a deepcopy (a snapshot)."""

    def __init__(self, subject_name: str, initial: dict[str, Any] | None = None) -> None:
        self.subject = load_subjects()[subject_name]
        if self.subject.search is None:
            raise SystemExit(f"subject {subject_name} declares no `search` section")
        self.spec = self.subject.search
        self.env: Any = make_env(self.subject)
        self.initial = dict(self.spec.initial) if initial is None else initial

    def _visit(self, obs: Any, reward: float, terminated: bool, truncated: bool) -> Visit:
        key = tuple(float(x) for x in self.spec.abstract(self.env, obs).reshape(-1))
        kind = KINDS.get(int(self.spec.kind(self.env, obs, terminated, truncated)), ENDED)
        handle = copy.deepcopy(self.env) if kind == ONGOING else None
        return Visit(key, kind, reward, handle)

    def root(self) -> Visit:
        obs, _ = self.env.reset(seed=self.spec.seed, options={"values": dict(self.initial)})
        return self._visit(obs, 0.0, False, False)

    def sample(self, state: Visit, action: int) -> Visit:
        self.env.close()
        self.env = copy.deepcopy(state.handle)
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return self._visit(obs, float(reward), bool(terminated), bool(truncated))


def parse_action_order(text: str, declared: tuple[int, ...]) -> list[int]:
    """`text` ("1,0") as the DFS's action order; SystemExit naming --action-order unless it permutes `declared`."""
    try:
        order = [int(part) for part in text.split(",")]
    except ValueError:
        raise SystemExit(f"--action-order {text!r}: not a comma-separated list of integers") from None
    if sorted(order) != sorted(declared):
        raise SystemExit(
            f"--action-order {text!r}: must be a permutation of the subject's search.actions {list(declared)}"
        )
    return order


def parse_initial(pairs: list[str], declared: dict[str, Any]) -> dict[str, Any]:
    """The declared initial test case with `pairs` ("noop_frames=30") overriding its integer values; SystemExit naming
    --initial for a name the subject does not declare or a value that is not an integer."""
    initial = dict(declared)
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in declared:
            raise SystemExit(
                f"--initial {pair!r}: the subject's search.initial declares {sorted(declared)}, not {name!r}"
            )
        try:
            initial[name] = int(value)
        except ValueError:
            raise SystemExit(f"--initial {pair!r}: {value!r} is not an integer") from None
    return initial


def search(
    subject_name: str,
    max_samples: int,
    action_order: str | None = None,
    initial: list[str] | None = None,
    revisit_shorter: bool = True,
    reference_rule: str = "first",
) -> dict[str, Any]:
    """The DFS on `subject_name` from its declared initial state (or the `initial` overrides, "name=value"), trying
    the search actions in `action_order` (default: the subject's declared order), with `revisit_shorter` and
    `reference_rule` as replications/replicate_search_based.py's; the reference document (success or not)."""
    spec = load_subjects()[subject_name].search
    if spec is None:
        raise SystemExit(f"subject {subject_name} declares no `search` section")
    values = parse_initial(initial or [], dict(spec.initial))
    actions = list(spec.actions) if action_order is None else parse_action_order(action_order, spec.actions)
    env = LocalSearchEnvironment(subject_name, values)
    if reference_rule == "shortest":
        result = shortest_reference_search(env, actions, spec.repetitions, max_samples=max_samples)
    else:
        result = depth_first_search(
            env, actions, spec.repetitions, max_samples=max_samples, revisit_shorter=revisit_shorter
        )
    agent_actions = int(env.env.action_space.n)
    document = reference_document(result, subject_name, values, spec.seed, actions, agent_actions)
    visited_rule = "revisit shorter" if revisit_shorter else "printed"
    document["stats"] |= {"visited_rule": visited_rule, "reference_rule": reference_rule}
    return document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", required=True, help="a Mario subject with a `search` section")
    parser.add_argument("--out", type=Path, required=True, help="where the reference document goes (JSON)")
    parser.add_argument("--max-samples", type=int, default=20_000, help="DFS budget in sampled transitions")
    parser.add_argument(
        "--action-order",
        default=None,
        help="the order the DFS tries the search actions, e.g. 1,0 (a permutation of the subject's search.actions; "
        "default the declared order)",
    )
    parser.add_argument(
        "--initial",
        nargs="+",
        default=[],
        metavar="NAME=VALUE",
        help="start from another initial test case, e.g. noop_frames=30 (default the subject's search.initial)",
    )
    parser.add_argument("--printed-visited-rule", action="store_true", help="never explore a visited state again")
    parser.add_argument(
        "--reference-rule",
        choices=("first", "shortest"),
        default="first",
        help="τ_ref: the first goal trace the DFS finds, or the shortest (DFS with a bisected horizon)",
    )
    args = parser.parse_args()
    if args.reference_rule == "shortest" and args.printed_visited_rule:
        parser.error(
            "--reference-rule shortest needs states revisited from shorter prefixes; drop --printed-visited-rule"
        )
    document = search(
        args.subject,
        args.max_samples,
        args.action_order,
        args.initial,
        not args.printed_visited_rule,
        args.reference_rule,
    )
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
