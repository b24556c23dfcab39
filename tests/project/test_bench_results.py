"""Every number the docs quote from a benchmark's output comes from that benchmark's results file.

A block marked `<!-- docs-test: output from=bench/NAME.py -->` quotes what bench/NAME.py printed; the bench wrote
results/bench/NAME.json in the same run (bench/results.py). `results=OTHER` names another file of that folder,
results/bench/OTHER.json, for a second configuration of the same bench (e.g. throughput_lunarlander). Every number
in the block must be one of the file's metrics as printed: the metric rounded to the number's decimals gives the
same digits (1,000 separators ignored). So a docs table cannot be typed by hand, mixed from several runs, or
outlive a rerun that changed it: rerun the bench and paste its output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.project.test_docs import PAGES, ROOT, Block, code_blocks

RESULTS_DIR = ROOT / "results" / "bench"
# a number standing alone: not part of a name (t0000001, float32, 1k) nor of a dotted version
NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w)")


def bench_blocks() -> list[Block]:
    """The output blocks of every docs page that quote a bench/ script."""
    return [
        block
        for page in PAGES
        for block in code_blocks(page)
        if block.kind == "output" and block.options.get("from", "").startswith("bench/")
    ]


def results_file(block: Block) -> Path:
    name = block.options.get("results") or Path(block.options["from"]).stem
    return RESULTS_DIR / f"{name}.json"


def unbacked_numbers(text: str, metrics: dict[str, object]) -> list[str]:
    """The numbers in `text` that no metric gives when rounded to the number's printed decimals."""
    values = [float(v) for v in metrics.values() if isinstance(v, int | float) and not isinstance(v, bool)]
    missing = []
    for token in NUMBER.findall(text):
        digits = token.replace(",", "")
        decimals = len(digits.partition(".")[2])
        if not any(f"{v:.{decimals}f}" == digits for v in values):
            missing.append(token)
    return missing


BLOCKS = bench_blocks()


def test_the_docs_quote_benchmark_output() -> None:
    assert len(BLOCKS) >= 3, "the benchmarks page quotes the benches' output in output blocks"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where() for b in BLOCKS])
def test_every_number_of_a_bench_output_block_is_in_its_results_file(block: Block) -> None:
    path = results_file(block)
    assert path.is_file(), (
        f"{block.where()}: quotes {block.options['from']}, but {path.relative_to(ROOT)} does not exist "
        f"(run python {block.options['from']} and paste what it prints)"
    )
    record = json.loads(path.read_text())
    missing = unbacked_numbers(block.body, record["metrics"])
    assert not missing, (
        f"{block.where()}: numbers not among the metrics of {path.relative_to(ROOT)} "
        f"({record['command']}, {record['finished_at']}): {', '.join(missing)}"
    )


def test_a_doctored_number_is_caught() -> None:
    """The check can fail: each quoted block with one number changed by one in its last digit is refused."""
    for block in BLOCKS:
        path = results_file(block)
        if not path.is_file():
            continue
        metrics = json.loads(path.read_text())["metrics"]
        match = next(NUMBER.finditer(block.body), None)
        assert match is not None, f"{block.where()}: an output block of a bench with no number in it"
        token = match[0]
        # its last digit changed, to a value no metric gives (a neighbour may happen to be another metric)
        candidates = [token[:-1] + str((int(token[-1]) + k) % 10) for k in range(1, 10)]
        doctored = next((c for c in candidates if unbacked_numbers(c, metrics)), None)
        assert doctored is not None, f"{block.where()}: every variant of {token} is a metric"
        text = block.body[: match.start()] + doctored + block.body[match.end() :]
        assert doctored in unbacked_numbers(text, metrics), block.where()
