"""The agent zoo: recipes train (tiny budgets here), logs have Indago's format, bundled models act end to end."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from agent_service.algorithms import model_file_name
from agent_service.registry import DEFAULT_MODEL_ROOT
from cli.launcher import LocalSuite, available_environments, environments_for
from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc, common_pb2, simulator_pb2, simulator_pb2_grpc
from common.server import client_channel
from common.space import ParameterSpace
from generator_service.surrogates.interaction_log import read_interaction_log
from offline.training import get_recipe, load_recipes, save_for_serving, train
from simulator_service.subject import load_subjects

MANIFEST = yaml.safe_load((DEFAULT_MODEL_ROOT / "manifest.yaml").read_text())["models"]


@pytest.mark.parametrize("name", ["cartpole-ppo", "mountaincar-continuous-sac"])
def test_each_algorithm_trains_and_logs_every_episode(name: str, tmp_path: Path) -> None:
    recipe = dataclasses.replace(get_recipe(name), n_envs=2)
    params = dict(recipe.hyperparams)
    if "buffer_size" in params:
        params.update(batch_size=32, gradient_steps=1, train_freq=1)
    budget = 2100  # each of the 2 envs finishes at least one MountainCar episode (999-step limit)
    meta = train(dataclasses.replace(recipe, hyperparams=params), tmp_path, timesteps=budget)
    assert (tmp_path / "model.zip").exists() and meta["timesteps"] == budget
    rows = read_interaction_log(tmp_path / "training_log.jsonl.gz")
    assert len(rows) == meta["training_episodes"] >= 1
    space = load_subjects()[recipe.subject].space
    for i, row in enumerate(rows, 1):
        assert row["episode"] == i and row["verdict"] in ("pass", "fail")
        assert space.violations(row["config"]) == []  # training episodes start from the subject's own space
    assert [r["timestep"] for r in rows] == sorted(r["timestep"] for r in rows)


def test_a_serving_copy_drops_optimizer_moments_and_acts_the_same(tmp_path: Path) -> None:
    # large off-policy models (Humanoid SAC) are bundled without Adam's moments to stay under 5 MiB
    from stable_baselines3 import SAC

    from agent_service.registry import SERVE_ONLY

    source = DEFAULT_MODEL_ROOT / "mountaincar-continuous-sac" / "model.zip"
    model = SAC.load(source, device="cpu", custom_objects=SERVE_ONLY)
    obs = np.random.default_rng(0).uniform(-1, 1, size=(64, 2)).astype(np.float32)
    before, _ = model.predict(obs, deterministic=True)
    size = save_for_serving(model, tmp_path / "model.zip")
    assert size < 0.6 * source.stat().st_size
    served = SAC.load(tmp_path / "model.zip", device="cpu", custom_objects=SERVE_ONLY)
    assert not served.actor.optimizer.state and not served.critic.optimizer.state
    after, _ = served.predict(obs, deterministic=True)
    assert np.array_equal(before, after)


def test_a_malformed_log_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"episode": 1, "timestep": 5, "config": {}, "verdict": "pass", "margin": 1}\n{"episode": 2\n')
    with pytest.raises(ValueError, match=":2: not JSON"):
        read_interaction_log(path)


def test_a_recipe_can_decay_the_learning_rate_linearly(tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    from offline.training import schedule_params

    recipe = get_recipe("lunarlander-ppo")
    params = {
        **recipe.hyperparams,
        "n_steps": 64,
        "batch_size": 64,
        "n_epochs": 1,
        "learning_rate": {"linear": [0.001, 0.0]},
    }
    train(dataclasses.replace(recipe, n_envs=2, hyperparams=params), tmp_path, timesteps=256)  # two updates
    model = PPO.load(tmp_path / "model.zip", device="cpu")
    # SB3 sets the rate before each update from the steps left: 0 of 256 at the second (a constant would stay 1e-3)
    assert model.policy.optimizer.param_groups[0]["lr"] == 0.0
    with pytest.raises(ValueError, match="hyperparams.clip_range must be a number or {linear: \\[start, end\\]}"):
        schedule_params({"clip_range": {"cosine": [0.2, 0.0]}})


def test_manifest_lists_every_recipe_with_measurements() -> None:
    for name, entry in MANIFEST.items():
        if entry["algorithm"] == "DDQN":  # Mario's agents: offline/mario_dqn.py trains them in .venv-mario
            _check_ddqn_model(name, entry)
            continue
        folder = name
        if "files" in entry:  # the network of another entry, listed again for a second subject (no copy, no recipe)
            folder = entry["files"]
            trained = MANIFEST[folder]
            assert "files" not in trained and trained["algorithm"] == entry["algorithm"], name
            assert trained["subject"] != entry["subject"], f"{name}: a second listing is for another subject"
            for key in ("seed", "timesteps", "train_wall_seconds", "file_bytes"):
                assert entry[key] == trained[key], f"{name}: {key} differs from {folder}'s, whose files it uses"
        assert folder in load_recipes(), name
        if entry["algorithm"] == "SEGMENTATION":  # DESIGNATE's DNN under test: measured on the real test split
            _check_image_model(DEFAULT_MODEL_ROOT / name / "model.pt", entry, ("test_pairs", "test_miou"))
            continue
        for key in (
            "subject",
            "algorithm",
            "seed",
            "timesteps",
            "train_wall_seconds",
            "file_bytes",
            "eval_tests",
            "success_rate",
        ):
            assert key in entry, f"{name} lacks {key}"
        assert entry["eval_tests"] >= 1000
        if "eval_failure_rate" in entry:  # written by gauntlet evaluate --model-root, with its Wilson interval
            judged = entry["eval_tests"] - entry.get("eval_errors", 0)
            assert entry["eval_failure_rate"] == pytest.approx(entry["eval_failures"] / judged, abs=1e-5), name
            low, high = entry["eval_failure_rate_ci95"]
            assert low <= entry["eval_failure_rate"] <= high, name
        model = DEFAULT_MODEL_ROOT / folder / model_file_name(entry["algorithm"])  # model.zip, or model.npz (Q-table)
        assert model.stat().st_size == entry["file_bytes"] < 5 * 1024 * 1024
        assert (DEFAULT_MODEL_ROOT / folder / "training_log.jsonl.gz").exists()


def _check_ddqn_model(name: str, entry: dict) -> None:
    folder = DEFAULT_MODEL_ROOT / name
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["subject"] == entry["subject"] and summary["train_steps"] == entry["timesteps"], name
    for key in ("file_bytes", "eval_mean_max_x", "eval_flag_rate", "eval_death_rate", "train_wall_seconds"):
        assert entry[key] == summary[key], f"{name}: manifest {key} {entry[key]} != summary.json {summary[key]}"
    assert (folder / "model.pt").stat().st_size == entry["file_bytes"] < 5 * 1024 * 1024
    with gzip.open(folder / "training_log.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    assert rows[-1] == {"summary": summary} and len(rows) - 1 == summary["train_episodes"], name


def _check_image_model(path: Path, entry: dict, measured: tuple[str, ...]) -> None:
    for key in ("seed", "epochs", "train_pairs", "train_wall_seconds", "file_bytes", *measured):
        assert key in entry, f"{path.parent.name} lacks {key}"
    assert path.stat().st_size == entry["file_bytes"] < 5 * 1024 * 1024
    assert (path.parent / "training_log.jsonl").read_text().count("\n") == entry["epochs"]  # one record per epoch


def test_translator_manifest_lists_every_translator_with_its_measured_quality() -> None:
    from translator_service.server import DEFAULT_TRANSLATOR_ROOT

    translators = yaml.safe_load((DEFAULT_TRANSLATOR_ROOT / "manifest.yaml").read_text())["translators"]
    assert set(translators) == {"pix2pix-urban", "pix2pix-mars"}
    for name, entry in translators.items():
        assert name in load_recipes() and entry["input_kind"] == "label_map", name
        _check_image_model(DEFAULT_TRANSLATOR_ROOT / name / "generator.pt", entry, ("val_dnn_on_real",))
        # the DNN under test segments translated validation maps about as well as real validation images
        assert abs(entry["val_dnn_on_translated"]["miou"] - entry["val_dnn_on_real"]["miou"]) < 0.1, name


def test_a_segmentation_does_not_depend_on_the_batch_it_came_in() -> None:
    from agent_service.registry import ModelRegistry

    registry = ModelRegistry()
    images = np.random.default_rng(0).integers(0, 256, size=(19, 64, 128, 3), dtype=np.uint8)
    reference = registry.act("segnet-urban", images)
    for size in (1, 2, 8, 9, 19):
        assert np.array_equal(registry.act("segnet-urban", images[:size]), reference[:size]), size


def test_every_bundled_model_acts_on_its_subject_through_the_services(tmp_path: Path) -> None:
    # Mario's models act where .venv-mario is built (CI builds it); elsewhere their subjects cannot run
    environments = available_environments()
    suite = LocalSuite(store_url=f"sqlite:///{tmp_path / 's.db'}", log_dir=tmp_path / "logs", environments=environments)
    with suite as local:
        agent = agent_pb2_grpc.AgentServiceStub(client_channel(local.endpoint("agent")))
        sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(local.endpoint("simulator")))
        listed = {m.name: m.subject for m in agent.ListModels(agent_pb2.ListModelsRequest()).models}
        assert listed == {name: e["subject"] for name, e in MANIFEST.items()}
        for name, subject in listed.items():
            if not set(environments_for([subject])) <= set(environments):
                continue
            space = ParameterSpace.from_proto(
                sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject)).parameter_space
            )
            rng = np.random.default_rng(0)
            cases: list[common_pb2.TestCase] = []
            while len(cases) < 2:  # uniform draws the subject accepts (e.g. Taxi's passenger != destination)
                case = space.test_case_to_proto(f"c{len(cases)}", space.sample(rng))
                check = sim.ValidateConfigs(simulator_pb2.ValidateConfigsRequest(subject=subject, test_cases=[case]))
                if check.results[0].valid:
                    cases.append(case)
            request = simulator_pb2.RunEpisodesRequest(subject=subject, seed=1, max_steps=50, test_cases=cases)
            request.model.name = name
            results = [r.result for r in sim.RunEpisodes(request, timeout=300)]
            assert len(results) == 2 and all(not r.error and r.steps >= 1 for r in results), name


def test_an_observations_action_does_not_depend_on_the_lock_step_batch_size() -> None:
    # Without fixed-size inference blocks this model's actions differed in the last bits at batch sizes 2, 3, 79, ...
    import numpy as np

    from agent_service.registry import ModelRegistry

    registry = ModelRegistry()
    observations = np.random.default_rng(0).normal(size=(200, 2)).astype(np.float32)
    reference = registry.act("mountaincar-continuous-sac", observations)
    for size in (1, 2, 3, 79, 97, 129, 200):
        assert np.array_equal(registry.act("mountaincar-continuous-sac", observations[:size]), reference[:size]), size


def test_a_model_listed_again_for_another_subject_uses_the_same_files(tmp_path: Path) -> None:
    from agent_service.registry import ModelRegistry
    from common.errors import FailedPrecondition

    listed = {
        "models": {
            "cartpole-ppo": {"subject": "cartpole", "algorithm": "PPO"},
            "cartpole-ppo-again": {"subject": "cartpole_other", "algorithm": "PPO", "files": "cartpole-ppo"},
            "nowhere": {"subject": "cartpole", "algorithm": "PPO", "files": "missing-model"},
            "chained": {"subject": "cartpole", "algorithm": "PPO", "files": "cartpole-ppo-again"},
            "other-kind": {"subject": "cartpole", "algorithm": "SAC", "files": "cartpole-ppo"},
        }
    }
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(listed))
    (tmp_path / "cartpole-ppo").mkdir()
    (tmp_path / "cartpole-ppo" / "model.zip").write_bytes(
        (DEFAULT_MODEL_ROOT / "cartpole-ppo" / "model.zip").read_bytes()
    )
    registry = ModelRegistry(tmp_path)
    assert registry.folder("cartpole-ppo-again") == tmp_path / "cartpole-ppo"
    obs = np.random.default_rng(0).uniform(-0.05, 0.05, size=(16, 4)).astype(np.float32)
    assert np.array_equal(registry.act("cartpole-ppo-again", obs), registry.act("cartpole-ppo", obs))
    for name in ("nowhere", "chained", "other-kind"):
        with pytest.raises(FailedPrecondition, match=f"model '{name}': files must name another listed"):
            registry.load(name)
