"""Subject pack classic: Gymnasium's classic-control, Box2D and MuJoCo tasks (CartPole, MountainCar, LunarLander,
Hopper, Humanoid).

Its subject files are the YAML files in this folder (entry-point group gauntlet.subject_dirs); its other parts are
declared under the groups of the services that run them (common/plugins.py). Page: docs/subjects/index.md.
"""

from pathlib import Path

FOLDER = Path(__file__).parent
