"""Gymnasium environments that Gauntlet ships itself (registered on import of their module)."""

import gymnasium as gym

# Parking (highway-env) is registered by name only: highway-env is imported when the env is made.
if "GauntletParking-v0" not in gym.registry:
    gym.register("GauntletParking-v0", entry_point="simulator_service.envs.parking:GauntletParkingEnv")
