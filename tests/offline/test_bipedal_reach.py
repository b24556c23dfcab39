"""replications/bipedal_reach.py: the slots a BipedalWalker episode reaches, from the hull's recorded x."""

from __future__ import annotations

from replications.bipedal_reach import Reach, Walker, reachable_key


def test_a_fault_key_keeps_only_the_codes_of_the_slots_the_episode_saw() -> None:
    reach = Reach(seen=2, met=1, failed=True, max_x=9.5, steps=120)
    assert reachable_key([3, 1, 2, 2, 1, 3, 1, 1, 1, 2, 2, 2, 3, 3, 3], reach) == (3, 1)
    # a terrain with more slots than codes cycles them
    assert reachable_key([1, 2], Reach(seen=3, met=2, failed=False, max_x=12.0, steps=300)) == (1, 2, 1)


def test_the_walker_sees_its_first_slots_only_and_the_replay_is_deterministic() -> None:
    walker = Walker()
    codes = [2, 3, 1] * 5
    reach = walker.reach(codes)
    again = Walker().reach(codes)  # a fresh env and agent give the same episode
    assert reach == again
    # the first obstacle starts within lidar range of the start; the bundled walker is slow (docs/zoo.md)
    assert 1 <= reach.seen < len(codes) and reach.met <= reach.seen
    assert 0 < reach.steps <= 300 and reach.max_x > 4.0
