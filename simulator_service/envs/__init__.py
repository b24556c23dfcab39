"""Gymnasium environments that Gauntlet ships itself (registered on import of their module)."""

import gymnasium as gym

# Parking (highway-env) and the obstacle walker (Box2D) are registered by name only: their libraries are imported
# when the env is made, so a simulator environment without them (the Mario one, .venv-mario) still loads this package.
if "GauntletBipedalObstacles-v0" not in gym.registry:
    gym.register(
        "GauntletBipedalObstacles-v0",
        entry_point="simulator_service.envs.bipedal_obstacles:ObstacleBipedalWalker",
        max_episode_steps=300,
    )
if "GauntletParking-v0" not in gym.registry:
    gym.register("GauntletParking-v0", entry_point="simulator_service.envs.parking:GauntletParkingEnv")
