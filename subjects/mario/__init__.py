"""Subject pack mario: Super Mario Bros. levels with action-trace inputs (search-based testing of RL).

Its subject files are the YAML files in this folder (entry-point group gauntlet.subject_dirs); its other parts are
declared under the groups of the services that run them (common/plugins.py). Page: docs/subjects/mario.md.
"""

from pathlib import Path

FOLDER = Path(__file__).parent
