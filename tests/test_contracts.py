"""The protobuf contracts: generated stubs are fresh, buf lint is clean, nothing breaks the last released contracts
(buf breaking against the committed baseline image), and tensors round-trip."""

from __future__ import annotations

import os
import re
import shutil
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


# The contracts of the last release, as a buf image (`buf build protos -o ...`) committed beside them: a fresh clone
# always has it, while a git tag may be missing from a CI clone (shallow, or tags not fetched). The same state is
# tagged contracts-v1.0.0 in git; see docs/contracts/clients.md for cutting the next baseline.
BASELINE_TAG = "contracts-v1.0.0"
BASELINE = ROOT / "protos" / "baseline" / f"{BASELINE_TAG}.binpb"


def _buf() -> Path:
    buf = ROOT / ".tools/node_modules/.bin/buf"
    if not buf.exists():
        if os.environ.get("GAUNTLET_REQUIRE_BUF"):
            pytest.fail("buf is not installed (.ci/run installs @bufbuild/buf into .tools)")
        pytest.skip("buf not installed: make lint-protos installs it")
    return buf


def _breaking(buf: Path, protos: Path, against: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(buf), "breaking", str(protos), "--against", against], capture_output=True, text=True, timeout=120
    )


def test_buf_lint_is_clean() -> None:
    result = subprocess.run([str(_buf()), "lint"], cwd=ROOT / "protos", capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_breaking_change_against_the_released_contracts() -> None:
    buf = _buf()
    result = _breaking(buf, ROOT / "protos", str(BASELINE))
    assert result.returncode == 0, result.stdout + result.stderr
    tagged = subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/tags/{BASELINE_TAG}"], cwd=ROOT)
    if tagged.returncode == 0:  # where the clone has the tag, check against it too
        result = _breaking(buf, ROOT / "protos", f"{ROOT}/.git#tag={BASELINE_TAG},subdir=protos")
        assert result.returncode == 0, result.stdout + result.stderr


def test_buf_breaking_rejects_a_renumbered_field(tmp_path: Path) -> None:
    """The check above can fail: a copy of the contracts with one field renumbered breaks the baseline."""
    buf = _buf()
    copy = tmp_path / "protos"
    shutil.copytree(ROOT / "protos", copy)
    proto = copy / "gauntlet" / "v1" / "simulator.proto"
    text, count = re.subn(r"uint32 max_steps = 6;", "uint32 max_steps = 60;", proto.read_text())
    assert count == 1, "the field this test renumbers moved: pick another"
    proto.write_text(text)
    result = _breaking(buf, copy, str(BASELINE))
    assert result.returncode != 0, result.stdout
    assert 'field "6" with name "max_steps" on message "DescribeEnvironmentResponse"' in result.stdout, result.stdout


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
