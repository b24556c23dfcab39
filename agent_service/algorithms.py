"""The RL algorithms the zoo trains and the agent service loads (Stable-Baselines3, sb3-contrib, tabular)."""

from __future__ import annotations

from typing import Any

# Tabular agents: a greedy Q-table in model.npz (agent_service/qtable.py). QTABLE names the model
# format; QLEARNING is the zoo's trainer of such tables (offline/qlearning.py), whose models
# load the same way.
TABULAR = ("QTABLE", "QLEARNING")


def algorithm_class(name: str) -> Any:
    """The class whose `load(path, device=...)` reads a model of this algorithm."""
    if name in TABULAR:
        from agent_service.qtable import QTablePolicy

        return QTablePolicy
    if name == SEGMENTATION:
        from agent_service.segmentation import SegmentationModel

        return SegmentationModel
    if name in QNETWORKS:
        from agent_service.qnetwork import QNetworkPolicy

        return QNetworkPolicy

    import sb3_contrib
    import stable_baselines3

    table = {
        "PPO": stable_baselines3.PPO,
        "A2C": stable_baselines3.A2C,
        "DQN": stable_baselines3.DQN,
        "SAC": stable_baselines3.SAC,
        "TD3": stable_baselines3.TD3,
        "DDPG": stable_baselines3.DDPG,
        "TQC": sb3_contrib.TQC,
        "TRPO": sb3_contrib.TRPO,
        "QRDQN": sb3_contrib.QRDQN,
    }
    if name not in table:
        known = sorted([*table, *TABULAR, *QNETWORKS, SEGMENTATION])
        raise KeyError(f"unknown algorithm {name!r}; known: {', '.join(known)}")
    return table[name]


# DESIGNATE's segmentation DNN under test: a TorchScript network in model.pt (agent_service/segmentation.py).
# PIX2PIX names the translator networks the zoo trains for the translator service (generator.pt there).
SEGMENTATION = "SEGMENTATION"
# A greedy TorchScript Q-network in model.pt (agent_service/qnetwork.py); DDQN is the zoo's Double DQN trainer of
# such networks (offline/mario_dqn.py), whose models load the same way. Their manifest entry declares the
# observation space (the network file does not hold it).
QNETWORKS = ("QNETWORK", "DDQN")
FILE_NAMES = {SEGMENTATION: "model.pt", "PIX2PIX": "generator.pt", **dict.fromkeys(QNETWORKS, "model.pt")}


def model_file_name(name: str) -> str:
    """The file a model of this algorithm is saved in, inside its zoo folder."""
    if name in FILE_NAMES:
        return FILE_NAMES[name]
    return "model.npz" if name in TABULAR else "model.zip"
