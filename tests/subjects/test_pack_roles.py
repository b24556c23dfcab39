"""Each service imports only its role's part of the packs: the oracle and the generator never import a simulator
backend (nor gymnasium), so their images need neither; the simulator's part loads in the simulator's environment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common.plugins import ROLE_GROUPS

PROBE = """
import json, sys
from common.plugins import load_role
loaded = load_role(sys.argv[1])
print(json.dumps({
    "names": {group: sorted(found) for group, found in loaded.items()},
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                      ("gymnasium", "simulator_service", "oracle_service", "generator_service", "subjects")),
}))
"""


def probe(role: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, role], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("role", ["oracle", "generator"])
def test_the_oracle_and_generator_roles_load_their_pack_parts_without_simulator_code(role: str) -> None:
    found = probe(role)
    modules = found["modules"]
    assert not [m for m in modules if m == "gymnasium" or m.startswith(("gymnasium.", "simulator_service"))], modules
    pack_modules = {m for m in modules if m.startswith("subjects.")}
    assert not [m for m in pack_modules if m.endswith((".backend", ".env", ".injector", ".client", ".rpc"))]
    if role == "oracle":
        assert {"donkey_off_road", "taxi_fault", "iou_car", "cartpole_balance"} <= set(
            found["names"]["gauntlet.oracles"]
        )
        assert "subjects.donkey.oracle" in pack_modules and "generator_service" not in {
            m.split(".")[0] for m in modules
        }
    else:
        assert {"donkey_track", "spot_free", "road_lanes", "distinct"} <= set(found["names"]["gauntlet.validators"])
        assert "subjects.donkey.track" in pack_modules and "oracle_service" not in {m.split(".")[0] for m in modules}


def test_the_simulator_role_loads_every_bundled_pack_folder_backend_and_injector() -> None:
    found = probe("simulator")
    names = found["names"]
    assert set(names) == set(ROLE_GROUPS["simulator"])
    assert {"classic", "donkey", "parking", "taxi", "bipedal", "urban", "airsim", "mario"} <= set(
        names["gauntlet.subject_dirs"]
    )
    assert {"gymnasium", "donkey", "airsim", "procedural_scene"} <= set(names["gauntlet.simulators"])
    assert {"donkey_track", "taxi_state", "parking_scene", "terrain_obstacles"} <= set(names["gauntlet.injectors"])
    assert "oracle_service" not in {m.split(".")[0] for m in found["modules"]}
