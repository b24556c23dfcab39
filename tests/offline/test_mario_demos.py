"""The DFS parameters of offline/mario_demos.py: the order it tries the search actions, the initial test case."""

from __future__ import annotations

import pytest

from offline.mario_demos import parse_action_order, parse_initial


def test_the_action_order_is_a_permutation_of_the_declared_search_actions() -> None:
    assert parse_action_order("1,0", (0, 1)) == [1, 0]
    assert parse_action_order("0,1", (0, 1)) == [0, 1]
    for bad in ("1,2", "1", "0,0,1", "1,0,1"):
        with pytest.raises(SystemExit, match="--action-order .* permutation of the subject's search.actions"):
            parse_action_order(bad, (0, 1))
    with pytest.raises(SystemExit, match="--action-order 'a,b': not a comma-separated list"):
        parse_action_order("a,b", (0, 1))


def test_the_initial_test_case_overrides_declared_parameters_only() -> None:
    assert parse_initial([], {"noop_frames": 0}) == {"noop_frames": 0}
    assert parse_initial(["noop_frames=30"], {"noop_frames": 0}) == {"noop_frames": 30}
    with pytest.raises(SystemExit, match="--initial 'frames=3': the subject's search.initial declares"):
        parse_initial(["frames=3"], {"noop_frames": 0})
    with pytest.raises(SystemExit, match="--initial 'noop_frames=x': 'x' is not an integer"):
        parse_initial(["noop_frames=x"], {"noop_frames": 0})
