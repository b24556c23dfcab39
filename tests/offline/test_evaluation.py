"""Chunked, multi-process and resumable model evaluation (offline/evaluation.py)."""

import json
from pathlib import Path

import pytest

from agent_service.registry import DEFAULT_MODEL_ROOT
from offline.evaluation import JournalMismatch, draw_test_cases, evaluate_model
from simulator_service.subject import get_subject

MODEL = "taxi-qlearning"  # ~1.3 % of inputs fail and episodes are short: a few hundred tests show failures


def test_workers_and_chunks_measure_the_same_inputs_as_one_process(tmp_path: Path) -> None:
    one = evaluate_model(DEFAULT_MODEL_ROOT, MODEL, 600, seed=11, workers=1, chunk=600)
    split = evaluate_model(DEFAULT_MODEL_ROOT, MODEL, 600, seed=11, workers=2, chunk=70)
    assert one.failures > 0, "the check needs failing inputs to compare"
    assert (split.failures, split.errors, split.failed_indices) == (one.failures, one.errors, one.failed_indices)
    assert len(one.failed_indices) == one.failures


def test_a_journal_resumes_and_refuses_other_settings(tmp_path: Path) -> None:
    journal = tmp_path / "eval.jsonl"
    full = evaluate_model(DEFAULT_MODEL_ROOT, MODEL, 600, seed=11, chunk=200, journal=journal)
    lines = journal.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["model"] == MODEL
    cases = draw_test_cases(get_subject("taxi_large"), 600, 11)
    recorded = [f for line in lines[1:] for f in json.loads(line)["failed"]]
    assert all(cases[f["index"]] == f["values"] for f in recorded)  # the journal names each failing input

    journal.write_text("\n".join(lines[:2]) + "\n")  # as if killed after the first chunk
    seen: list[int] = []
    resumed = evaluate_model(DEFAULT_MODEL_ROOT, MODEL, 600, seed=11, chunk=200, journal=journal, progress=seen.append)
    assert seen[0] == 200  # the first chunk came from the journal, not from a rerun
    assert (resumed.failures, resumed.failed_indices) == (full.failures, full.failed_indices)
    assert len(journal.read_text().splitlines()) == 4

    with pytest.raises(JournalMismatch, match="seed=11.*seed=12"):
        evaluate_model(DEFAULT_MODEL_ROOT, MODEL, 600, seed=12, chunk=200, journal=journal)

    journal.write_text(journal.read_text() + '{"start": 400, "end"\n')  # a line cut off mid-write
    with pytest.raises(JournalMismatch, match=":5 is not JSON"):
        evaluate_model(DEFAULT_MODEL_ROOT, MODEL, 600, seed=11, chunk=200, journal=journal)
