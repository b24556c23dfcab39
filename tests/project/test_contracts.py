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

ROOT = Path(__file__).resolve().parents[2]


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


def test_generated_typescript_client_is_fresh(tmp_path: Path) -> None:
    """clients/typescript/gen is what buf.gen.yaml (protoc-gen-es) makes of the current contracts."""
    buf = _buf()
    if not (ROOT / "clients/typescript/node_modules/.bin/protoc-gen-es").exists():
        if os.environ.get("GAUNTLET_REQUIRE_NODE"):
            pytest.fail("protoc-gen-es is not installed (.ci/run runs npm ci in clients/typescript)")
        pytest.skip("protoc-gen-es not installed: run npm ci in clients/typescript")
    result = subprocess.run(
        [str(buf), "generate", "protos", "--template", "buf.gen.yaml", "-o", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    fresh = tmp_path / "clients/typescript/gen"
    committed = ROOT / "clients/typescript/gen"
    names = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
    assert {n.suffix for n in names} == {".js", ".ts"} and len(names) == 14  # .js + .d.ts for the 7 protos
    stale = [str(n) for n in names if (fresh / n).read_bytes() != (committed / n).read_bytes()]
    assert not stale, f"regenerate: .tools/node_modules/.bin/buf generate protos --template buf.gen.yaml ({stale})"


def test_go_java_and_csharp_generate_into_the_packages_the_options_name(tmp_path: Path) -> None:
    """clients/buf.gen.other-languages.yaml (docs/contracts/clients.md) works: every .proto yields Go in package
    gauntletv1, Java in dev.gauntlet.v1 and C# in namespace Gauntlet.V1."""
    buf = _buf()
    missing = [tool for tool in ("protoc", "protoc-gen-go") if shutil.which(tool) is None]
    if missing:
        if os.environ.get("GAUNTLET_REQUIRE_BUF"):
            pytest.fail(f"{missing} not installed (.ci/run installs protobuf-compiler and golang-goprotobuf-dev)")
        pytest.skip(f"{missing} not installed (Debian: protobuf-compiler, golang-goprotobuf-dev)")
    template = "clients/buf.gen.other-languages.yaml"
    result = subprocess.run(
        [str(buf), "generate", "protos", "--template", template, "-o", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "clients"
    protos = sorted(p.stem for p in (ROOT / "protos/gauntlet/v1").glob("*.proto"))
    go = sorted((out / "go/gauntlet/v1").glob("*.pb.go"))
    assert [p.name.removesuffix(".pb.go") for p in go] == protos
    assert all(re.search(r"^package gauntletv1$", p.read_text(), re.M) for p in go)
    java = out / "java/dev/gauntlet/v1"
    assert "package dev.gauntlet.v1;" in (java / "CampaignSpec.java").read_text()  # java_multiple_files
    csharp = sorted((out / "csharp").glob("*.cs"))
    assert [p.stem.lower() for p in csharp] == protos
    assert all("namespace Gauntlet.V1 {" in p.read_text() for p in csharp)


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
