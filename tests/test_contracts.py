"""The protobuf contracts: generated stubs are fresh, buf lint is clean, and tensors round-trip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common.generated.gauntlet.v1 import common_pb2
from common.tensor import TensorError, from_tensor, to_tensor

ROOT = Path(__file__).resolve().parent.parent


def test_generated_stubs_are_fresh() -> None:
    result = subprocess.run(
        [sys.executable, "tools/gen_protos.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_lint_is_clean() -> None:
    buf = ROOT / ".tools/node_modules/.bin/buf"
    if not buf.exists():
        if os.environ.get("GAUNTLET_REQUIRE_BUF"):
            pytest.fail("buf is not installed (.ci/run installs @bufbuild/buf into .tools)")
        pytest.skip("buf not installed: make lint-protos installs it")
    result = subprocess.run([str(buf), "lint"], cwd=ROOT / "protos", capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([1, -2, 3], dtype=np.int64),
        np.zeros((2, 5, 5, 3), dtype=np.uint8),
        np.array(3.5),
        np.array([True, False]),
    ],
)
def test_tensor_round_trip(array: np.ndarray) -> None:
    back = from_tensor(to_tensor(array))
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_tensor_is_little_endian_row_major() -> None:
    t = to_tensor(np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert t.data == bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])


def test_malformed_tensor_names_the_problem() -> None:
    bad = common_pb2.Tensor(dtype=common_pb2.ELEMENT_TYPE_FLOAT32, shape=[2, 2], data=b"\x00" * 12)
    with pytest.raises(TensorError, match="12 bytes but shape \\[2, 2\\]"):
        from_tensor(bad)
    with pytest.raises(TensorError, match="not a known element type"):
        from_tensor(common_pb2.Tensor(dtype=99, shape=[1], data=b"\x00"))
