"""The QD fault-diversity paper's enlarged Taxi (18 x 13 grid, 11 locations), with its fault signals.

Registered on import as `GauntletTaxiLarge-v0`. Dynamics and rewards follow Gymnasium's Taxi-v3
(deterministic, no rain, no fickle passenger):

- actions: 0 south, 1 north, 2 east, 3 west, 4 pick-up, 5 drop-off;
- observation: one integer, ((taxi_row * 13 + taxi_col) * 12 + passenger) * 11 + destination, where
  passenger is a location index 0..10 or 11 = in the taxi, and destination is a location index 0..10;
- rewards: -1 per step, +20 for delivering the passenger at its destination, -10 for an illegal
  pick-up or drop-off. Dropping the passenger at another location is legal (-1), as in Gymnasium.

The paper's faults, exposed as episode attributes the simulator records as signals:

- `illegal_action`: a pick-up where the passenger is not waiting, or a drop-off that is neither at
  the destination nor at another location with the passenger aboard (Gymnasium's -10 cases);
- `crash`: a move into a wall or off the grid (Gymnasium leaves the taxi in place; so do we).

With `end_on_fault=True` (the default, and how test episodes run, as in the authors' code) the
episode terminates at the first fault. With `end_on_fault=False` a fault only costs its reward and
the episode goes on, which is plain Gymnasium Taxi; the authors trained their Q-table that way,
and so does our Q-learning recipe. The flags are sticky for the episode in both modes.

Behaviour descriptor counters: `moves_before_pickup` counts the move actions (0-3, crashes
included) before the first successful pick-up, `moves_after_pickup` those after it.

The episode limit (200 steps, the `max_episode_steps` of the registration and the subject's
`max_steps`) is our choice, the value the authors' evaluation loop used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml
from gymnasium import spaces

ENV_ID = "GauntletTaxiLarge-v0"
MAP_FILE = Path(__file__).parent / "maps" / "taxi_large_map.yaml"
MAX_EPISODE_STEPS = 200
SOUTH, NORTH, EAST, WEST, PICKUP, DROPOFF = range(6)
_MOVES = {SOUTH: (1, 0), NORTH: (-1, 0), EAST: (0, 1), WEST: (0, -1)}
_SIDEWAYS = {SOUTH: (EAST, WEST), NORTH: (EAST, WEST), EAST: (SOUTH, NORTH), WEST: (SOUTH, NORTH)}


@dataclass(frozen=True)
class TaxiMap:
    """A Gymnasium-style Taxi map: grid size, walls between horizontal neighbours, named locations."""

    rows: int
    columns: int
    east_wall: tuple[tuple[bool, ...], ...]  # east_wall[r][c]: a wall between (r, c) and (r, c + 1)
    locations: tuple[tuple[int, int], ...]  # (row, col) of location A, B, ... in letter order
    names: tuple[str, ...]
    layout: tuple[str, ...]

    @property
    def in_taxi(self) -> int:
        """The passenger index that means "in the taxi" (11 for 11 locations)."""
        return len(self.locations)

    def blocked(self, row: int, col: int, action: int) -> bool:
        """True when the move `action` from (row, col) hits a wall or leaves the grid."""
        dr, dc = _MOVES[action]
        r, c = row + dr, col + dc
        if not (0 <= r < self.rows and 0 <= c < self.columns):
            return True
        if dc == 1:
            return self.east_wall[row][col]
        if dc == -1:
            return self.east_wall[row][c]
        return False


def load_map(path: Path = MAP_FILE) -> TaxiMap:
    """Reads and checks a map file (see taxi_large_map.yaml for the format)."""
    data = yaml.safe_load(path.read_text())
    rows, cols = int(data["rows"]), int(data["columns"])
    lines = data["layout"].rstrip("\n").split("\n")
    width = 2 * cols + 1
    if len(lines) != rows + 2:
        raise ValueError(f"{path}: layout has {len(lines)} lines, expected {rows} rows between two borders")
    border = "+" + "-" * (width - 2) + "+"
    if lines[0] != border or lines[-1] != border:
        raise ValueError(f"{path}: the first and last layout lines must be {border!r}")
    walls: list[tuple[bool, ...]] = []
    found: dict[str, tuple[int, int]] = {}
    for r, line in enumerate(lines[1:-1]):
        if len(line) != width or line[0] != "|" or line[-1] != "|":
            raise ValueError(f"{path}: row {r} must be {width} characters between '|' borders, got {line!r}")
        for c in range(cols):
            cell = line[2 * c + 1]
            if cell.isalpha():
                if cell in found:
                    raise ValueError(f"{path}: location {cell} appears twice")
                found[cell] = (r, c)
            elif cell != " ":
                raise ValueError(f"{path}: row {r} column {c}: cell must be a space or a letter, got {cell!r}")
        separators = line[2:-1:2]
        if set(separators) - {":", "|"}:
            raise ValueError(f"{path}: row {r}: separators must be ':' or '|', got {separators!r}")
        walls.append(tuple(s == "|" for s in separators))
    names = tuple(sorted(found))
    if names != tuple(chr(ord("A") + i) for i in range(len(names))):
        raise ValueError(f"{path}: locations must be the consecutive letters A, B, ..., got {', '.join(names)}")
    return TaxiMap(rows, cols, tuple(walls), tuple(found[n] for n in names), names, tuple(lines))


class TaxiLargeEnv(gym.Env):
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        map_path: str | None = None,
        end_on_fault: bool = True,
        render_mode: str | None = None,
        slip: float = 0.0,
    ) -> None:
        self.map = load_map(Path(map_path) if map_path else MAP_FILE)
        self.end_on_fault = bool(end_on_fault)
        # a stochastic taxi (Gymnasium's rainy Taxi: 0.2): a move goes to one of its two sideways neighbours with this
        # probability, drawn from np_random; 0 (the default) draws nothing, so the deterministic subject is unchanged
        if not 0.0 <= float(slip) <= 1.0:
            raise ValueError(f"slip={slip} is outside [0, 1]")
        self.slip = float(slip)
        self.render_mode = render_mode
        m = self.map
        self.n_passenger = m.in_taxi + 1
        self.n_destination = len(m.locations)
        self.observation_space = spaces.Discrete(m.rows * m.columns * self.n_passenger * self.n_destination)
        self.action_space = spaces.Discrete(6)
        self._location_index = {loc: i for i, loc in enumerate(m.locations)}
        self.taxi_row = self.taxi_col = self.passenger = self.destination = 0
        self._clear_episode()

    # -- state -------------------------------------------------------------------------------
    def encode(self, taxi_row: int, taxi_col: int, passenger: int, destination: int) -> int:
        return (
            (taxi_row * self.map.columns + taxi_col) * self.n_passenger + passenger
        ) * self.n_destination + destination

    def decode(self, obs: int) -> tuple[int, int, int, int]:
        obs, destination = divmod(int(obs), self.n_destination)
        obs, passenger = divmod(obs, self.n_passenger)
        taxi_row, taxi_col = divmod(obs, self.map.columns)
        return taxi_row, taxi_col, passenger, destination

    def _obs(self) -> int:
        return self.encode(self.taxi_row, self.taxi_col, self.passenger, self.destination)

    def _clear_episode(self) -> None:
        self.crash = False
        self.illegal_action = False
        self.delivered = False
        self.picked_up = False
        self.moves_before_pickup = 0
        self.moves_after_pickup = 0

    def set_state(self, taxi_row: int, taxi_col: int, passenger: int, destination: int) -> int:
        """Starts the episode from this state (the test input); returns its observation.

        `passenger` may be 11 (in the taxi) here; test inputs use 0..10. Equal passenger and
        destination locations are accepted (the subject's validator rejects them as test inputs).
        """
        m = self.map
        checks = (
            ("taxi_row", taxi_row, m.rows),
            ("taxi_col", taxi_col, m.columns),
            ("passenger", passenger, self.n_passenger),
            ("destination", destination, self.n_destination),
        )
        for name, value, n in checks:
            if not 0 <= int(value) < n:
                raise ValueError(f"{name}={value} is outside 0..{n - 1}")
        self.taxi_row, self.taxi_col = int(taxi_row), int(taxi_col)
        self.passenger, self.destination = int(passenger), int(destination)
        self._clear_episode()
        self.picked_up = self.passenger == m.in_taxi
        return self._obs()

    # -- Gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict]:
        """A random start (taxi anywhere, passenger at a location, another location as destination),
        or `options={"state": (taxi_row, taxi_col, passenger, destination)}`."""
        super().reset(seed=seed)
        state = (options or {}).get("state")
        if state is None:
            rng = self.np_random
            passenger = int(rng.integers(self.n_destination))
            destination = int(rng.integers(self.n_destination - 1))
            destination += destination >= passenger
            state = (int(rng.integers(self.map.rows)), int(rng.integers(self.map.columns)), passenger, destination)
        obs = self.set_state(*state)
        return obs, {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict]:
        a = int(action)
        m = self.map
        if a < PICKUP and self.slip > 0.0 and self.np_random.random() < self.slip:
            a = _SIDEWAYS[a][int(self.np_random.integers(2))]
        reward, terminated, fault = -1.0, False, False
        if a < PICKUP:
            if self.picked_up:
                self.moves_after_pickup += 1
            else:
                self.moves_before_pickup += 1
            if m.blocked(self.taxi_row, self.taxi_col, a):
                self.crash = fault = True
            else:
                dr, dc = _MOVES[a]
                self.taxi_row += dr
                self.taxi_col += dc
        elif a == PICKUP:
            if self.passenger < m.in_taxi and m.locations[self.passenger] == (self.taxi_row, self.taxi_col):
                self.passenger = m.in_taxi
                self.picked_up = True
            else:
                reward = -10.0
                self.illegal_action = fault = True
        elif a == DROPOFF:
            here = self._location_index.get((self.taxi_row, self.taxi_col))
            if self.passenger == m.in_taxi and here == self.destination:
                self.passenger = here
                reward, terminated = 20.0, True
                self.delivered = True
            elif self.passenger == m.in_taxi and here is not None:
                self.passenger = here  # left at another location, as Gymnasium's Taxi
            else:
                reward = -10.0
                self.illegal_action = fault = True
        else:
            raise ValueError(f"action {action!r} is not in 0..5")
        if fault and self.end_on_fault:
            terminated = True
        info = {"crash": self.crash, "illegal_action": self.illegal_action, "delivered": self.delivered}
        return self._obs(), reward, terminated, False, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        rows = [list(line) for line in self.map.layout]
        if self.passenger < self.map.in_taxi:
            r, c = self.map.locations[self.passenger]
            rows[r + 1][2 * c + 1] = rows[r + 1][2 * c + 1].lower()
        taxi = "@" if self.passenger == self.map.in_taxi else "T"
        rows[self.taxi_row + 1][2 * self.taxi_col + 1] = taxi
        legend = (
            f"passenger: {'taxi' if self.passenger == self.map.in_taxi else self.map.names[self.passenger]}"
            f", destination: {self.map.names[self.destination]}"
        )
        return "\n".join("".join(r) for r in rows) + "\n" + legend + "\n"


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="subjects.taxi.env:TaxiLargeEnv", max_episode_steps=MAX_EPISODE_STEPS)
