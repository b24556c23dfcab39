"""Subject pack parking: highway-env's Parking with a test case that lays out the lot (Indago).

Its subject files are the YAML files in this folder (entry-point group gauntlet.subject_dirs); its other parts are
declared under the groups of the services that run them (common/plugins.py). Page: docs/subjects/parking.md.
"""

from pathlib import Path

FOLDER = Path(__file__).parent
