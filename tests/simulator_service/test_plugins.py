"""Third-party plug-ins: a package installed beside Gauntlet adds a strategy and an oracle through entry points.

The package (tests/plugin_fixture) is pip-installed into a temporary folder, not the shared venv, and put on
PYTHONPATH for the CLI and the services it starts; nothing in Gauntlet names it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator_service.store import CampaignStore

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "plugin_fixture"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("plugin-source") / "gauntlet-grid-plugin"
    shutil.copytree(FIXTURE, source)  # the build writes build/ and *.egg-info beside the sources: not in the repo
    site = tmp_path_factory.mktemp("plugin-site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "--target", str(site), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return site


def run(args: list[str], site: Path | None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    env["COLUMNS"] = "200"  # rich wraps tables at the terminal width; keep each parameter on one line
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_cli_lists_an_installed_plugin_with_its_parameters_and_package(plugin_site: Path) -> None:
    listed = run(["-m", "cli.main", "strategies"], plugin_site)
    assert listed.returncode == 0, listed.stderr
    block = listed.stdout[listed.stdout.index("grid  (package gauntlet-grid-plugin)") :]
    block = block[: block.index("\n\n")]
    assert "Grid: every combination of `points` evenly spaced values" in block
    row = next(line for line in block.splitlines() if line.strip().startswith("points"))
    assert row.strip().startswith("points = 3: ") and "an integer in [2, 10]" in row  # name = default: allowed
    assert "prt  (package gauntlet)" in listed.stdout  # Gauntlet's own plug-ins are listed the same way
    oracles = run(["-m", "cli.main", "oracles"], plugin_site)
    assert oracles.returncode == 0, oracles.stderr
    assert any("cart_right" in line and "gauntlet-grid-plugin" in line for line in oracles.stdout.splitlines())
    without = run(["-m", "cli.main", "strategies"], None)
    assert without.returncode == 0 and "gauntlet-grid-plugin" not in without.stdout


def test_a_plugin_strategys_parameters_are_validated_from_its_schema(plugin_site: Path) -> None:
    code = (
        "from common.space import ParameterSpace\n"
        "from generator_service.strategies import make_strategy\n"
        "from generator_service.strategies.base import StrategyParamError\n"
        "space = ParameterSpace.from_config([{'name': 'x', 'low': 0, 'high': 1}])\n"
        "print(make_strategy('grid', space, 0, {'points': 3.0}).ask(10))\n"
        "for bad in ({'points': 1}, {'points': True}, {'spacing': 2}):\n"
        "    try:\n"
        "        make_strategy('grid', space, 0, bad)\n"
        "    except StrategyParamError as exc:\n"
        "        print(exc)\n"
    )
    out = run(["-c", code], plugin_site)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[{'x': 0.0}, {'x': 0.5}, {'x': 1.0}]"  # an integral float from the wire is an integer
    assert lines[1] == "grid parameter points must be an integer in [2, 10], got 1"
    assert lines[2].startswith("grid parameter points must be an integer in [2, 10], got True")
    assert lines[3] == "strategy 'grid' has no parameter(s) spacing; its parameters: points"


def test_a_campaign_runs_the_plugin_strategy_and_oracle_through_the_services(plugin_site: Path, tmp_path: Path) -> None:
    spec = tmp_path / "grid.yaml"
    spec.write_text(
        "campaign:\n  subject: cartpole\n  model: cartpole-ppo\n  strategy: grid\n  strategy_params: {points: 2}\n"
        "  oracle: cart_right\n  keep_final_observations: true\n  seed: 1\n"
        "  budget: {max_executions: 100}\n  batch_size: 5\n"
    )
    store = f"sqlite:///{tmp_path / 's.db'}"
    out = run(
        ["-m", "cli.main", "run", str(spec), "--id", "plugin-grid", "--store-url", store,
         "--report-dir", str(tmp_path / "reports")],
        plugin_site,
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    campaigns = CampaignStore(store)
    assert campaigns.campaign("plugin-grid").stop_reason == "strategy_exhausted"  # type: ignore[union-attr]
    rows = sorted(campaigns.executions("plugin-grid"), key=lambda r: r.index)
    # the grid strategy's effect: exactly the 2^4 corners of CartPole's box, each once, in its order
    corners = itertools.product((-0.9, 0.9), (-0.3, 0.3), (-0.0523599, 0.0523599), (-0.0349066, 0.0349066))
    asked = [tuple(round(r.values[n], 7) for n in ("x", "x_dot", "theta", "theta_dot")) for r in rows]
    assert sorted(asked) == sorted(corners) and [r.index for r in rows] == list(range(1, 17))
    # the cart_right oracle's effect: it judged every episode, failing exactly those ending right of the centre
    for r in rows:
        final_x = r.final_observation[0]
        assert r.reason.startswith("grid-plugin: the cart ended at x =")
        assert r.verdict == ("fail" if final_x > 0 else "pass") and r.margin == pytest.approx(-final_x)
        assert r.descriptors == pytest.approx((final_x,))


def test_context_reaches_only_the_factories_that_take_it() -> None:
    from common.space import ParameterSpace
    from generator_service.strategies import make_strategy
    from generator_service.strategies.base import accepted_context
    from generator_service.strategies.indago import TrainFailReplay
    from generator_service.strategies.random_testing import RandomTesting

    context = {"subject_rules": None, "unrelated": 1}
    assert accepted_context(TrainFailReplay, context) == {"subject_rules": None}
    assert accepted_context(RandomTesting, context) == {}
    space = ParameterSpace.from_config([{"name": "x", "low": 0, "high": 1}])
    assert len(make_strategy("random", space, 0, None, **context).ask(3)) == 3  # RandomTesting takes no context


def test_schema_choices_match_the_operators_and_settings_they_name() -> None:
    from typing import get_args

    from generator_service.strategies.indago import SETTINGS, SettingName
    from generator_service.strategies.mutation import INTEGER_OPERATORS
    from generator_service.strategies.search_support import IntegerMutation

    assert get_args(IntegerMutation) == INTEGER_OPERATORS
    assert get_args(SettingName) == tuple(SETTINGS)


def test_a_broken_plugin_is_left_out_of_listings_and_named_when_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from common import plugins
    from common.plugins import PluginError
    from oracle_service.oracles import get_oracle, oracles

    # An installed distribution whose oracle entry point names a module that does not exist.
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gauntlet.oracles]\nbroken = no_such_module_here:ORACLE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.plugin_names.cache_clear()
    plugins.load_plugin.cache_clear()
    try:
        assert "broken" in plugins.plugin_names(plugins.ORACLES)
        listed = oracles()
        assert "broken" not in listed and "cartpole_balance" in listed
        with pytest.raises(PluginError, match="'broken'.*broken-plugin.*ModuleNotFoundError"):
            get_oracle("broken")
    finally:
        plugins.plugin_names.cache_clear()
        plugins.load_plugin.cache_clear()
