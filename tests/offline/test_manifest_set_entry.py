"""set_entry, what `gauntlet train --model-root` lists a model with: only the entry's lines change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from offline.manifest import set_entry

BUNDLED = """# Bundled subjects: the comment that a YAML round trip would drop.
models:
  a:
    subject: cartpole
    description: a folded description
      that goes on here  # why it was chosen
    eval_tests: 10

  b:
    subject: taxi
# trailing comment before the next section
translators:
  t:
    subject: urban
"""


def test_a_new_entry_goes_to_the_end_of_its_section_and_every_other_line_stays(tmp_path: Path) -> None:
    (tmp_path / "manifest.yaml").write_text(BUNDLED)
    set_entry(tmp_path, "c", {"subject": "mario_1_2", "observation_shape": (4, 84, 84), "eval_flag_rate": 0.05})
    text = (tmp_path / "manifest.yaml").read_text()
    assert text.startswith(BUNDLED.split("# trailing")[0])  # models' old lines unchanged, then the new entry
    assert text.endswith("# trailing comment before the next section\ntranslators:\n  t:\n    subject: urban\n")
    data = yaml.safe_load(text)
    assert data["models"]["c"] == {"subject": "mario_1_2", "observation_shape": [4, 84, 84], "eval_flag_rate": 0.05}
    assert list(data["models"]) == ["a", "b", "c"] and data["translators"] == {"t": {"subject": "urban"}}


def test_a_listed_entry_is_replaced_in_place(tmp_path: Path) -> None:
    (tmp_path / "manifest.yaml").write_text(BUNDLED)
    set_entry(tmp_path, "a", {"subject": "cartpole", "eval_tests": 20})
    text = (tmp_path / "manifest.yaml").read_text()
    assert text.startswith("# Bundled subjects") and "folded description" not in text
    assert "\n\n  b:\n" in text  # the blank line between the entries stays
    data = yaml.safe_load(text)
    assert data["models"] == {"a": {"subject": "cartpole", "eval_tests": 20}, "b": {"subject": "taxi"}}
    set_entry(tmp_path, "t2", {"subject": "mars"}, section="translators")
    assert yaml.safe_load((tmp_path / "manifest.yaml").read_text())["translators"]["t2"] == {"subject": "mars"}


def test_a_missing_manifest_or_section_is_created(tmp_path: Path) -> None:
    set_entry(tmp_path, "x", {"subject": "cartpole"})
    assert yaml.safe_load((tmp_path / "manifest.yaml").read_text()) == {"models": {"x": {"subject": "cartpole"}}}
    set_entry(tmp_path, "p", {"subject": "urban"}, section="translators")
    assert yaml.safe_load((tmp_path / "manifest.yaml").read_text())["translators"] == {"p": {"subject": "urban"}}


def test_a_section_written_in_flow_style_is_refused_not_rewritten(tmp_path: Path) -> None:
    (tmp_path / "manifest.yaml").write_text("models: {a: {subject: cartpole}}\n")
    with pytest.raises(ValueError, match="section 'models' is not a block"):
        set_entry(tmp_path, "b", {"subject": "taxi"})
    assert (tmp_path / "manifest.yaml").read_text() == "models: {a: {subject: cartpole}}\n"
