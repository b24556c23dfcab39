"""The RL algorithms the zoo trains and the agent service loads (Stable-Baselines3 and sb3-contrib)."""

from __future__ import annotations

from typing import Any


def algorithm_class(name: str) -> Any:
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
        raise KeyError(f"unknown algorithm {name!r}; known: {', '.join(sorted(table))}")
    return table[name]
