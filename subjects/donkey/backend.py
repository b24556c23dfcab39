"""The ``donkey`` backend: a remote Donkey simulator (Unity, Indago's modified build) as a Gymnasium env.

The generator's machine never runs Unity: each env holds a TCP connection to a DonkeySim host given by
``$GAUNTLET_DONKEY_ENDPOINT`` (host:port; it wins) or the subject's ``env_kwargs.endpoint``. Either may list
several hosts separated by commas: one car runs per simulator, so each env leases a free endpoint when it
connects and gives it back when it closes (``EndpointLeases``); an env that finds every endpoint taken fails
with SimUnavailable asking for lower parallelism or more hosts. Run campaigns with a parallelism of at most the
number of endpoints.

Episode (protocol in client.py):

1. first reset: connect; on ``scene_selection_ready`` send ``load_scene`` (``scene``), on ``need_car_config``
   send ``cam_config`` (the image size), until ``car_loaded``;
2. every reset: send ``regen_track`` with the track string ("S 5@DY 15.2@L 3@...", the authors' format) and
   ``lane_string`` "right", wait until the sim echoes it back in ``send_track`` (``track_confirm_timeout_s``),
   then ``reset_car`` and wait for the first ``telemetry``. ASSUMPTION: a stock DonkeySim has no
   ``regen_track``; Indago's authors modified the sim so the input track is instantiated each episode, and this
   is the message their client sends (``DonkeyUnitySimHandler.send_regen_track``) and the echo it waits for.
   Without that modified host the reset fails with a SimUnavailable naming the missing confirmation;
3. every step: drop telemetry that arrived while the agent thought (the sim streams it), send ``control``
   (steering, throttle, brake 0 as strings), and take the next ``telemetry`` as the outcome.

Observation: the camera image, ``image_shape`` = (120, 160, 3) uint8 (the paper's 160x120 RGB; resized if the
sim sends another size). Action: (steering in [-1, 1], throttle in [``min_throttle``, ``max_throttle``]).

Termination: off-road when |cte - ``cte_centre``| > ``max_cte`` (failure; defaults -2.0 and 6.0 m reproduce the
authors' test ``|cte/10 + 0.2| > 0.6``, i.e. a car driving in the right lane; the authors also require the
"ground" material in the last frames, which we do not), or the end line, when telemetry's ``material`` is
``end_material`` ("end_line", the modified sim's marker) -- success. The step limit is the runner's.

Reward (paper section 3.3, with the authors' constants): ``-step_penalty`` per step, ``+waypoint_bonus /
totalNodes`` per newly crossed waypoint (telemetry ``hit`` = "waypointline_<k>"), ``-cte_weight * min(|cte -
cte_centre| / max_cte, 1)``; off-road ends with ``crash_reward``.

Signals (for traces and oracles): ``cte``, ``position`` (x, z), ``speed``, ``off_road``, ``reached_end``,
``max_abs_deviation`` (largest |cte - cte_centre| so far), ``cte_limit`` (= max_cte), ``waypoints``.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from common.space import ParamValue
from simulator_service.plugin_api import EndpointLeases, Injector, RemoteSubjectEnv, Subject
from subjects.donkey.client import (
    DonkeyConnection,
    Endpoint,
    SimProtocolError,
    SimUnavailable,
    parse_endpoint,
)
from subjects.donkey.track import track_string

ENDPOINT_ENV = "GAUNTLET_DONKEY_ENDPOINT"
REQUIRED_TELEMETRY = ("image", "cte", "pos_x", "pos_z")


# One table per process: the simulators are external, shared by every DonkeyEnv this process creates.
LEASES = EndpointLeases("Donkey", ENDPOINT_ENV, SimUnavailable)


class DonkeyEnv(gym.Env):
    """One car on one remote Donkey simulator (module docstring). ``reset(options={"track": ...})``."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        endpoint: str | Sequence[str],
        scene: str = "generated_track",
        image_shape: tuple[int, int, int] = (120, 160, 3),
        max_cte: float = 6.0,
        cte_centre: float = -2.0,
        end_material: str = "end_line",
        min_throttle: float = 0.0,
        max_throttle: float = 1.0,
        step_penalty: float = 0.1,
        waypoint_bonus: float = 100.0,
        cte_weight: float = 0.1,
        crash_reward: float = -10.0,
        connect_timeout_s: float = 10.0,
        io_timeout_s: float = 10.0,
        track_confirm_timeout_s: float = 20.0,
        lane: str = "right",
        render_mode: str | None = None,
    ) -> None:
        texts = endpoint.split(",") if isinstance(endpoint, str) else list(endpoint)
        self.endpoints = [parse_endpoint(t) for t in texts if str(t).strip()]
        if not self.endpoints:
            raise ValueError("donkey endpoint is empty; give host:port (several: comma-separated)")
        self.endpoint: Endpoint | str = self.endpoints[0] if len(self.endpoints) == 1 else ",".join(map(str, texts))
        if len(image_shape) != 3 or image_shape[2] != 3 or min(image_shape) < 1:
            raise ValueError(f"donkey image_shape must be (height, width, 3), got {image_shape!r}")
        if not max_cte > 0:
            raise ValueError(f"donkey max_cte must be > 0 (metres), got {max_cte!r}")
        if not -1.0 <= min_throttle < max_throttle <= 1.0:
            raise ValueError(
                f"donkey throttle range must satisfy -1 <= min_throttle < max_throttle <= 1, got "
                f"[{min_throttle}, {max_throttle}]"
            )
        self.scene, self.lane, self.end_material = scene, lane, end_material
        self.image_shape = tuple(int(v) for v in image_shape)
        self.max_cte, self.cte_centre = float(max_cte), float(cte_centre)
        self.step_penalty, self.waypoint_bonus = float(step_penalty), float(waypoint_bonus)
        self.cte_weight, self.crash_reward = float(cte_weight), float(crash_reward)
        self.connect_timeout_s, self.io_timeout_s = float(connect_timeout_s), float(io_timeout_s)
        self.track_confirm_timeout_s = float(track_confirm_timeout_s)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, self.image_shape, dtype=np.uint8)
        self.action_space = gym.spaces.Box(
            np.array([-1.0, min_throttle], dtype=np.float32),
            np.array([1.0, max_throttle], dtype=np.float32),
            dtype=np.float32,
        )
        self._conn: DonkeyConnection | None = None
        self._leased: Endpoint | None = None
        self.track_string = ""
        self._clear_episode()

    def _clear_episode(self) -> None:
        self.cte = 0.0
        self.position = np.zeros(2)
        self.speed = 0.0
        self.off_road = False
        self.reached_end = False
        self.max_abs_deviation = 0.0
        self.cte_limit = self.max_cte
        self.waypoints = 0
        self._total_nodes = 0
        self._crossed: set[str] = set()
        self._image = np.zeros(self.image_shape, dtype=np.uint8)

    # -- connection ---------------------------------------------------------------------------------------
    def _connection(self) -> DonkeyConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._release()
        leased = LEASES.acquire(self.endpoints)
        try:
            conn = DonkeyConnection(leased, self.connect_timeout_s, self.io_timeout_s)
        except BaseException:
            LEASES.release(leased)
            raise
        self._leased = leased
        self.endpoint = leased
        height, width, _ = self.image_shape
        handlers = {
            "scene_selection_ready": lambda _m: conn.send("load_scene", scene_name=self.scene),
            "need_car_config": lambda _m: conn.send(
                "cam_config", img_w=str(width), img_h=str(height), img_d="3", img_enc="PNG"
            ),
        }
        try:
            conn.wait_for("car_loaded", timeout_s=self.connect_timeout_s, handlers=handlers)
        except BaseException:
            conn.close()
            self._release()
            raise
        self._conn = conn
        return conn

    # -- gym API ------------------------------------------------------------------------------------------
    def load_track(self, track: Any) -> np.ndarray:
        """Sends ``track`` to the simulator, waits for its confirmation, resets the car; the first observation."""
        text = track_string(track)
        conn = self._connection()
        conn.send("regen_track", track_string=text, lane_string=self.lane)
        echoed: list[str] = []
        try:
            while True:
                reply = conn.wait_for("send_track", timeout_s=self.track_confirm_timeout_s)
                echoed.append(str(reply.get("track_string")))
                if echoed[-1] == text:
                    break
        except SimUnavailable as exc:
            if conn.closed:
                raise
            raise SimUnavailable(
                f"the Donkey simulator at {self.endpoint} did not confirm the track {text!r} within "
                f"{self.track_confirm_timeout_s:g} s (echoes: {echoed or 'none'}); Gauntlet needs a sim that accepts "
                "'regen_track' and answers 'send_track' (Indago's modified DonkeySim), not a stock build"
            ) from exc
        self.track_string = text
        conn.send("reset_car")
        self._clear_episode()
        self._apply(conn.wait_for("telemetry"))
        return self._image.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)  # the simulator is not seedable; episodes repeat with a majority verdict instead
        track = (options or {}).get("track")
        if track is None:
            raise ValueError("DonkeyEnv.reset needs options={'track': [...]} (12 (command, value) pairs)")
        return self.load_track(track), {"track": self.track_string}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._conn is None or self._conn.closed:
            raise SimUnavailable(f"no open episode on the Donkey simulator at {self.endpoint}; reset first")
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (2,):
            raise ValueError(f"a Donkey action is (steering, throttle), got shape {np.shape(action)}")
        box = self.action_space
        assert isinstance(box, gym.spaces.Box)  # set in __init__; narrows the type for the clip below
        a = np.clip(a, box.low, box.high)
        conn = self._conn
        for message in conn.drain():  # stale frames the sim streamed while the agent was thinking
            if message["msg_type"] == "telemetry":
                self._apply(message)
        conn.send("control", steering=str(float(a[0])), throttle=str(float(a[1])), brake="0.0")
        before = self.waypoints
        self._apply(conn.wait_for("telemetry"))
        deviation = abs(self.cte - self.cte_centre)
        self.off_road = deviation > self.max_cte
        terminated = self.off_road or self.reached_end
        if self.off_road:
            reward = self.crash_reward
        else:
            reward = -self.step_penalty - self.cte_weight * min(deviation / self.max_cte, 1.0)
            reward += (self.waypoints - before) * self.waypoint_bonus / max(self._total_nodes, 1)
        info = {"cte": self.cte, "speed": self.speed, "is_success": bool(self.reached_end and not self.off_road)}
        return self._image.copy(), float(reward), bool(terminated), False, info

    def render(self) -> np.ndarray:
        return self._image.copy()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._release()

    def _release(self) -> None:
        if self._leased is not None:
            LEASES.release(self._leased)
            self._leased = None

    def __del__(self) -> None:  # an env dropped without close() must not keep its simulator leased
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def signal(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self, name), dtype=np.float64)

    # -- telemetry ----------------------------------------------------------------------------------------
    def _apply(self, message: dict[str, Any]) -> None:
        missing = [k for k in REQUIRED_TELEMETRY if k not in message]
        if missing:
            raise SimProtocolError(
                f"telemetry from the Donkey simulator at {self.endpoint} lacks "
                f"{', '.join(missing)} (fields: {', '.join(sorted(message))})"
            )
        try:
            self.cte = float(message["cte"])
            self.position = np.array([float(message["pos_x"]), float(message["pos_z"])])
            self.speed = float(message.get("speed", 0.0))
            self._total_nodes = int(message.get("totalNodes", 0))
        except (TypeError, ValueError) as exc:
            raise SimProtocolError(
                f"telemetry from the Donkey simulator at {self.endpoint} has a non-numeric "
                f"cte/position/speed/totalNodes ({exc})"
            ) from None
        self._image = self._decode_image(message["image"])
        self.max_abs_deviation = max(self.max_abs_deviation, abs(self.cte - self.cte_centre))
        hit = str(message.get("hit", "none"))
        if hit.startswith("waypointline_") and hit not in self._crossed:
            self._crossed.add(hit)
            self.waypoints = len(self._crossed)
        if str(message.get("material", "")) == self.end_material:
            self.reached_end = True

    def _decode_image(self, data: Any) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        try:
            image = Image.open(io.BytesIO(base64.b64decode(str(data), validate=True))).convert("RGB")
        except (ValueError, UnidentifiedImageError, OSError) as exc:
            raise SimProtocolError(
                f"telemetry from the Donkey simulator at {self.endpoint} carries an image that "
                f"is not base64 PNG/JPEG ({exc})"
            ) from None
        height, width, _ = self.image_shape
        if image.size != (width, height):
            image = image.resize((width, height))
        return np.asarray(image, dtype=np.uint8)


def make_env(subject: Subject, render_mode: str | None = None) -> gym.Env:
    """The subject's SubjectEnv over a DonkeyEnv; the endpoint(s) come from $GAUNTLET_DONKEY_ENDPOINT or env_kwargs."""
    kwargs = dict(subject.env_kwargs)
    endpoint = os.environ.get(ENDPOINT_ENV) or kwargs.pop("endpoint", None)
    kwargs.pop("endpoint", None)
    if not endpoint:
        raise ValueError(
            f"subject {subject.name}: no Donkey simulator endpoint; set ${ENDPOINT_ENV}=host:port or "
            "env_kwargs.endpoint in the subject file"
        )
    if "image_shape" in kwargs:
        kwargs["image_shape"] = tuple(kwargs["image_shape"])
    try:
        env = DonkeyEnv(
            endpoint if isinstance(endpoint, (list, tuple)) else str(endpoint), render_mode=render_mode, **kwargs
        )
    except TypeError as exc:
        raise ValueError(f"subject {subject.name}: env_kwargs do not fit the donkey backend ({exc})") from None
    return RemoteSubjectEnv(env, subject)


def donkey_track(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """The ``donkey_track`` injector: the test case's track (parameter ``parameter``, default "track") is sent to the
    remote simulator, which builds it and resets the car (``DonkeyEnv.load_track``)."""
    name = str(options.get("parameter", "track"))

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        return env.unwrapped.load_track(values[name])  # type: ignore[attr-defined]

    return inject
