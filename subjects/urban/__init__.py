"""Subject pack urban: procedural urban and Mars camera scenes for segmentation DNNs (DESIGNATE).

Its subject files are the YAML files in this folder (entry-point group gauntlet.subject_dirs); its other parts are
declared under the groups of the services that run them (common/plugins.py). Page: docs/subjects/urban.md.
"""

from pathlib import Path

FOLDER = Path(__file__).parent
