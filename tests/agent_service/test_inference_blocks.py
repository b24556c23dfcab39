"""An observation's action does not depend on its lock-step batch: the agent pads every forward pass to a rung of
INFERENCE_BLOCKS, and every bundled policy gives each row the same bits at every rung as in a block of 128 rows."""

from __future__ import annotations

import numpy as np
import pytest

from agent_service.inference import INFERENCE_BLOCKS, INFERENCE_ROWS, block_rows, predict_block
from agent_service.registry import ModelRegistry
from common.space_spec import flat_shape

REGISTRY = ModelRegistry()
# every policy of the bundled zoo but segmentation networks (images in, label maps out), and of the policies on
# images only the first of each algorithm (their forward pass is slow on a CPU)
POLICIES: list[str] = []
for _name, _entry in sorted(REGISTRY.entries.items()):
    _image = len(_entry.metadata.get("observation_shape", ())) >= 3
    if _entry.algorithm != "SEGMENTATION" and not (
        _image and any(REGISTRY.entries[p].algorithm == _entry.algorithm for p in POLICIES)
    ):
        POLICIES.append(_name)
# sizes on both sides of every rung, the sizes that once differed (2, 3, 79, 97) and a batch over the top rung
SIZES = (1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 79, 97, 127, 128, 129, 200)


def test_a_batch_runs_in_the_smallest_rung_that_holds_it() -> None:
    assert INFERENCE_BLOCKS == tuple(sorted(INFERENCE_BLOCKS)) and INFERENCE_ROWS == INFERENCE_BLOCKS[-1]
    assert [block_rows(n) for n in (1, 16, 17, 32, 33, 64, 65, 128)] == [16, 16, 32, 32, 64, 64, 128, 128]


def _in_blocks_of_128(model: object, observations: np.ndarray) -> np.ndarray:
    """The actions as before the rungs: every block padded to 128 rows with copies of its first row."""
    out = []
    for start in range(0, len(observations), 128):
        block = observations[start : start + 128]
        padded = np.concatenate([block, np.repeat(block[:1], 128 - len(block), axis=0)])
        out.append(predict_block(model, padded)[: len(block)])
    return np.concatenate(out)


@pytest.mark.parametrize("name", POLICIES)
def test_every_rung_gives_each_observation_the_action_of_a_128_row_block(name: str) -> None:
    model = REGISTRY.load(name)
    shape = flat_shape(model.observation_space)
    rng = np.random.default_rng(0)
    space = model.observation_space
    if hasattr(space, "n"):  # a tabular agent: state indices
        observations = rng.integers(0, int(space.n), size=(200, *shape))
    elif np.issubdtype(space.dtype, np.integer):  # e.g. stacked grey frames
        observations = rng.integers(space.low, space.high, size=(200, *shape), endpoint=True).astype(space.dtype)
    else:  # small and large magnitudes: the kernels' rounding differs most on large ones
        observations = (rng.normal(size=(200, *shape)) * rng.choice([0.1, 1.0, 10.0], size=(200, 1))).astype(np.float32)
    sizes = SIZES if np.prod(shape) < 1000 else (1, 17, 33, 65, 129)  # image policies: a rung each (slow forward)
    for size in sizes:
        for offset in (0, 1):  # another first row: another padding row
            batch = observations[offset : offset + size]
            got = REGISTRY.act(name, batch)
            assert np.array_equal(got, _in_blocks_of_128(model, batch).astype(got.dtype)), (name, size, offset)
