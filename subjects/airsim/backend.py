"""The ``airsim`` backend: Unreal/AirSim hosts driven through the airsim package's client (msgpack-rpc over TCP).

Hosts: ``$GAUNTLET_AIRSIM_ENDPOINT`` (host:port[,host:port...]; it wins) or the subject's ``env_kwargs.endpoint``.
One vehicle runs per host, so each env leases a free host when it first connects and gives it back when it
closes (simulator_service/backends/hosts.py); run campaigns with a parallelism of at most the number of hosts.
On connecting, the env pings the host and checks its API version (``getServerVersion`` must be one of
``server_versions``, default [1], and the host's ``getMinRequiredClientVersion`` at most the airsim client's
version): another version is FAILED_PRECONDITION naming it. Every call has a timeout (``call_timeout_s``); the
wire's errors are in rpc.py (UNAVAILABLE naming the host, DATA_LOSS for what cannot be read).

Two episode kinds, chosen by the subject's ``env_id``:

- ``capture`` (DESIGNATE's camera captures, settings.json ``SimMode: ComputerVision``): reset places the vehicle
  (the camera rides on it) at the test input's pose with ``simSetVehiclePose`` and takes the Scene and the
  Segmentation image of camera ``camera`` in ONE ``simGetImages`` call (so both show the same instant). The
  segmentation colours map to the subject's ``classes`` through ``env_kwargs.segmentation`` (per class:
  ``object_id``, the ``color`` AirSim renders for that id, the mesh name regexes that get the id with
  ``simSetSegmentationObjectID`` when the env connects; every mesh gets ``background_id`` first, and pixels of
  no class colour take the ``background`` class). The env keeps the urban pack's backend.py contract exactly
  (observation, action, signal names, dtypes and shapes, ``attach_views``/``translator_input`` for the image
  stage), so the urban subject's strategy, translator, DNN and oracle run on either.
- ``car`` (driving policies, ``SimMode: Car``): reset resets the car, places it at the start pose, applies the scene
  parameters and returns the camera image; each step sends ``setCarControls`` (steering, throttle from the action)
  and advances the simulation by ``step_seconds`` (``simContinueForTime`` with the simulation paused, then waits
  for ``simIsPause``), then reads ``getCarState`` (speed, position) and ``simGetCollisionInfo``. A collision or
  leaving the road (distance to the declared ``road`` centre line over its ``half_width``) ends the episode as a
  failure (oracle ``airsim_crash``); reaching within ``end_radius`` of the road's last point ends it as a success.

Scene parameters (both kinds; the subject's ``injector`` of kind ``airsim_scene`` names which parameters feed
them; ``scene_reader``): ``pose`` {x, y, yaw (degrees)} in AirSim's NED frame (metres from the player start),
``weather`` {AirSim weather parameter: parameter name} (``simEnableWeather`` then ``simSetWeatherParameter``,
intensity 0..1), ``time_of_day``: a parameter in hours 0..24 (``simSetTimeOfDay`` on ``date``).

Car signals: ``speed``, ``position`` (x, y), ``lane_distance`` (distance to the centre line, m), ``collision``,
``off_road``, ``reached_end``, ``max_lane_distance``, ``lane_limit`` (= half_width).
"""

from __future__ import annotations

import io
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

from common.errors import FailedPrecondition
from common.space import ParamValue
from simulator_service.plugin_api import Endpoint, EndpointLeases, RemoteSubjectEnv, Subject, parse_endpoints
from subjects.airsim.rpc import HostUnavailable, MalformedResponse, RpcConnection
from subjects.urban.lanes import (  # the urban pack's lane rule: airsim_urban is its scene
    Lane,
    inside_lanes,
    parse_lanes,
)

ENDPOINT_ENV = "GAUNTLET_AIRSIM_ENDPOINT"
DEFAULT_PORT = 41451  # AirSim's RPC port (settings.json "ApiServerPort")
LEASES = EndpointLeases("AirSim", ENDPOINT_ENV, HostUnavailable)
WEATHER = ("rain", "roadwetness", "snow", "roadsnow", "mapleleaf", "roadleaf", "dust", "fog")  # airsim's order
INSTALL_HINT = (
    "pip install msgpack-rpc-python==0.4.1 && pip install --no-build-isolation --no-deps airsim==1.8.1 "
    "(what `make` does; docs/subjects/airsim.md)"
)
T = TypeVar("T")
EMPTY_U8 = np.zeros((0,), dtype=np.uint8)


def airsim_module() -> Any:
    """The airsim package, or FAILED_PRECONDITION saying how to install it (its sdist needs a two-step install)."""
    try:
        import airsim
    except ImportError as exc:
        raise FailedPrecondition(
            f"the airsim backend needs the airsim package ({exc}); install it with {INSTALL_HINT}"
        ) from None
    return airsim


@dataclass(frozen=True)
class SceneSetting:
    """What a test input sets in the world: the start pose and the declared scene parameters."""

    x: float
    y: float
    yaw_deg: float
    weather: Mapping[str, float]
    hour: float | None


@dataclass(frozen=True)
class SegmentationClass:
    name: str
    object_id: int
    color: tuple[int, int, int]
    meshes: tuple[str, ...]


def segmentation_classes(spec: Sequence[Mapping[str, Any]]) -> list[SegmentationClass]:
    out = []
    for i, c in enumerate(spec):
        try:
            color = tuple(int(v) for v in c["color"])
            cls = SegmentationClass(str(c["name"]), int(c["object_id"]), color, tuple(c.get("meshes") or ()))  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"airsim classes[{i}] needs name, object_id (0..255), color [r, g, b] ({exc})") from None
        if len(color) != 3 or not 0 <= cls.object_id <= 255:
            raise ValueError(f"airsim classes[{i}] ({cls.name}): color must be [r, g, b], object_id 0..255")
        for pattern in cls.meshes:
            re.compile(pattern)  # AirSim matches them as regexes: a bad one fails here, not on the host
        out.append(cls)
    if len({c.color for c in out}) != len(out):
        raise ValueError("airsim classes: two classes share a segmentation colour; give each its own object_id")
    return out


class AirSimEnv(gym.Env):
    """One vehicle on one leased AirSim host; the two episode kinds subclass it."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        endpoint: str | Sequence[str],
        vehicle: str = "",
        camera: str = "0",
        image_shape: Sequence[int] = (64, 96, 3),
        server_versions: Sequence[int] = (1,),
        connect_timeout_s: float = 10.0,
        call_timeout_s: float = 10.0,
        date: str = "2024-06-21",
        render_mode: str | None = None,
    ) -> None:
        self.endpoints = parse_endpoints(endpoint, DEFAULT_PORT, "airsim")
        self.endpoint: Endpoint | str = (
            self.endpoints[0] if len(self.endpoints) == 1 else ",".join(map(str, self.endpoints))
        )
        shape = tuple(int(v) for v in image_shape)
        if len(shape) != 3 or shape[2] != 3 or min(shape) < 1:
            raise ValueError(f"airsim image_shape must be (height, width, 3), got {list(image_shape)}")
        self.image_shape: tuple[int, int, int] = (shape[0], shape[1], 3)
        self.vehicle, self.camera, self.date = str(vehicle), str(camera), str(date)
        self.server_versions = tuple(int(v) for v in server_versions)
        self.connect_timeout_s, self.call_timeout_s = float(connect_timeout_s), float(call_timeout_s)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, self.image_shape, dtype=np.uint8)
        self._client: Any = None
        self._conn: RpcConnection | None = None
        self._leased: Endpoint | None = None
        self._image = np.zeros(self.image_shape, dtype=np.uint8)

    # -- connection ---------------------------------------------------------------------------------------
    def client(self) -> Any:
        """The airsim client on this env's leased host, connected and checked.

        A host that cannot be reached is skipped for the next free one (a host that went down mid-campaign must not
        fail every later episode of this env); UNAVAILABLE only when no free host answers, naming each one tried.
        """
        if self._conn is not None and not self._conn.closed:
            return self._client
        self._release()
        airsim = airsim_module()
        tried: list[Endpoint] = []
        failures: list[str] = []
        while True:
            try:
                leased = LEASES.acquire(self.endpoints, exclude=tried)
            except HostUnavailable:
                if not failures:
                    raise
                raise HostUnavailable("; ".join(failures)) from None
            self._leased, self.endpoint = leased, leased
            try:
                return self._open(airsim, leased)
            except HostUnavailable as exc:  # down, or dropped us during the check: the next free host may answer
                self.close()
                tried.append(leased)
                failures.append(str(exc))
            except BaseException:
                self.close()
                raise

    def _open(self, airsim: Any, endpoint: Endpoint) -> Any:
        self._conn = RpcConnection(endpoint, self.connect_timeout_s, self.call_timeout_s)
        # The airsim client's API over our transport: its __init__ would only open msgpack-rpc-python's tornado
        # client (rpc.py says why not), so the instance is made without it.
        client = airsim.CarClient.__new__(airsim.CarClient)
        client.client = self._conn
        self._client = client
        self._check_version(client)
        self.on_connect(client)
        return client

    def _check_version(self, client: Any) -> None:
        self.call("ping", client.ping)
        server = self.call("getServerVersion", client.getServerVersion)
        needs = self.call("getMinRequiredClientVersion", client.getMinRequiredClientVersion)
        ours = client.getClientVersion()
        if not isinstance(server, int) or not isinstance(needs, int):
            raise MalformedResponse(
                f"the AirSim host at {self.endpoint} reports a non-integer API version ({server!r}, needs {needs!r})"
            )
        if server not in self.server_versions or needs > ours:
            raise FailedPrecondition(
                f"the AirSim host at {self.endpoint} speaks API version {server} and needs clients of version "
                f"{needs} or later; this backend speaks version(s) {', '.join(map(str, self.server_versions))} with "
                f"airsim client version {ours} (settings: server_versions in the subject's env_kwargs)"
            )

    def on_connect(self, client: Any) -> None:
        """Once per connection, after the version check."""

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Runs one airsim API call; a reply the airsim types cannot decode is DATA_LOSS naming the host."""
        try:
            return fn()
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
            raise MalformedResponse(
                f"the AirSim host at {self.endpoint} answered {what} with data the airsim client cannot read "
                f"({type(exc).__name__}: {exc})"
            ) from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._client = None
        self._release()

    def _release(self) -> None:
        if self._leased is not None:
            LEASES.release(self._leased)
            self._leased = None

    def __del__(self) -> None:  # an env dropped without close() must not keep its host leased
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- scene --------------------------------------------------------------------------------------------
    def place(self, client: Any, scene: SceneSetting) -> None:
        """Pose, weather and time of day of the test input."""
        airsim = airsim_module()
        pose = airsim.Pose(
            airsim.Vector3r(float(scene.x), float(scene.y), 0.0),
            airsim.to_quaternion(0.0, 0.0, math.radians(scene.yaw_deg)),
        )
        self.call("simSetVehiclePose", lambda: client.simSetVehiclePose(pose, True, self.vehicle))
        if scene.weather:
            self.call("simEnableWeather", lambda: client.simEnableWeather(True))
            for name, value in scene.weather.items():
                self.call("simSetWeatherParameter", partial(client.simSetWeatherParameter, WEATHER.index(name), value))
        if scene.hour is not None:
            hours = float(scene.hour) % 24.0
            stamp = f"{self.date} {int(hours):02d}:{int(hours * 60) % 60:02d}:00"
            self.call("simSetTimeOfDay", lambda: client.simSetTimeOfDay(True, stamp, False, 1.0, 60, True))

    def capture(self, client: Any, segmentation: bool) -> list[np.ndarray]:
        """Scene (and Segmentation) of the camera in one simGetImages call, PNG-compressed, as RGB arrays."""
        airsim = airsim_module()
        kinds = [airsim.ImageType.Scene] + ([airsim.ImageType.Segmentation] if segmentation else [])
        requests = [airsim.ImageRequest(self.camera, kind, False, True) for kind in kinds]
        responses = self.call("simGetImages", lambda: client.simGetImages(requests, self.vehicle))
        if not isinstance(responses, list) or len(responses) != len(kinds):
            raise MalformedResponse(
                f"the AirSim host at {self.endpoint} answered simGetImages with {len(responses or [])} image(s) for "
                f"{len(kinds)} requests (camera {self.camera!r}, vehicle {self.vehicle!r})"
            )
        return [self._decode(r, name) for r, name in zip(responses, ("Scene", "Segmentation"))]

    def _decode(self, response: Any, kind: str) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        data = getattr(response, "image_data_uint8", None)
        if not isinstance(data, (bytes, bytearray)) or not data:
            raise MalformedResponse(
                f"the AirSim host at {self.endpoint} sent a {kind} image without PNG bytes (is camera "
                f"{self.camera!r} in its settings.json?)"
            )
        try:
            image: Image.Image = Image.open(io.BytesIO(bytes(data)))
            image.load()
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise MalformedResponse(
                f"the AirSim host at {self.endpoint} sent a {kind} image that is not a PNG ({exc})"
            ) from None
        height, width, _ = self.image_shape
        if image.size != (width, height):
            # nearest for segmentation: interpolating would invent colours that belong to no class
            resample = Image.Resampling.NEAREST if kind == "Segmentation" else Image.Resampling.BILINEAR
            image = image.resize((width, height), resample)
        return np.asarray(image.convert("RGB"), dtype=np.uint8)

    def render(self) -> np.ndarray:
        return self._image.copy()

    def signal(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self, name), dtype=np.float64)

    def start(self, scene: SceneSetting) -> np.ndarray:
        raise NotImplementedError


class AirSimCaptureEnv(AirSimEnv):
    """One camera capture per episode, with the signals of the urban pack's contract (subjects/urban/backend.py):
    ``image``, ``label_map`` (uint8 class index per pixel), ``on_road``, and the image stage's ``realistic_image``,
    ``features``, ``prediction_simulated``, ``prediction_realistic``, ``t_relevance``, ``iou_threshold``,
    ``min_class_share``."""

    def __init__(
        self,
        endpoint: str | Sequence[str],
        classes: Sequence[str],
        segmentation: Mapping[str, Any],
        image: Mapping[str, int],
        scene_of: Callable[[Mapping[str, ParamValue]], SceneSetting],
        lanes: Sequence[Lane] = (),
        background_id: int = 0,
        t_relevance: float = 0.1,
        iou_threshold: float = 0.5,
        min_class_share: float = 0.0,
        **kwargs: Any,
    ) -> None:
        height, width = int(image["height"]), int(image["width"])
        super().__init__(endpoint, image_shape=(height, width, 3), **kwargs)
        self.classes = tuple(str(c) for c in classes)
        table = {str(k): v for k, v in dict(segmentation).items() if k != "background"}
        if sorted(table) != sorted(self.classes):
            raise ValueError(
                f"airsim segmentation must map exactly the classes {list(self.classes)} (object_id, color, meshes), "
                f"got {sorted(table)}"
            )
        self.segmentation = segmentation_classes([{"name": c, **dict(table[c])} for c in self.classes])
        background = segmentation.get("background", self.classes[0])
        if background not in self.classes:
            raise ValueError(f"airsim segmentation.background must be one of {list(self.classes)}, got {background!r}")
        self.background_index = self.classes.index(background)
        self.background_id = int(background_id)
        self.scene_of, self.lanes = scene_of, list(lanes)
        self.t_relevance, self.iou_threshold = np.float64(t_relevance), np.float64(iou_threshold)
        self.min_class_share = np.float64(min_class_share)
        self.action_space = gym.spaces.Box(0, len(self.classes) - 1, (height, width), dtype=np.uint8)
        self._clear()

    def _clear(self) -> None:
        height, width, _ = self.image_shape
        self.image = np.zeros(self.image_shape, dtype=np.uint8)
        self.label_map = np.zeros((height, width), dtype=np.uint8)
        self.on_road = np.uint8(0)
        self.realistic_image = EMPTY_U8
        self.features = np.zeros((0,), dtype=np.float32)
        self.prediction_simulated = EMPTY_U8
        self.prediction_realistic = EMPTY_U8

    def on_connect(self, client: Any) -> None:
        # every mesh first gets the background's id, then each class's patterns (later sets win, as in AirSim)
        self.call(
            "simSetSegmentationObjectID", lambda: client.simSetSegmentationObjectID(".*", self.background_id, True)
        )
        for cls in self.segmentation:
            for pattern in cls.meshes:
                self.call(
                    "simSetSegmentationObjectID",
                    partial(client.simSetSegmentationObjectID, pattern, cls.object_id, True),
                )

    def labels_of(self, segmentation: np.ndarray) -> np.ndarray:
        """Class index per pixel from AirSim's segmentation colours; the background class where none matches."""
        codes = (segmentation[..., 0].astype(np.int64) << 16) | (segmentation[..., 1].astype(np.int64) << 8)
        codes |= segmentation[..., 2].astype(np.int64)
        labels = np.full(codes.shape, self.background_index, dtype=np.uint8)
        for index, cls in enumerate(self.segmentation):
            r, g, b = cls.color
            labels[codes == (r << 16 | g << 8 | b)] = index
        return labels

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        values = (options or {}).get("values")
        if values is None:
            raise ValueError("AirSimCaptureEnv.reset needs options={'values': {...}} (a camera pose)")
        self._clear()
        scene = self.scene_of(values)
        client = self.client()
        self.place(client, scene)
        rgb, segmentation = self.capture(client, segmentation=True)
        self.image, self._image = rgb, rgb
        self.label_map = self.labels_of(segmentation)
        self.on_road = np.uint8(inside_lanes(self.lanes, scene.x, scene.y) if self.lanes else 1)
        return self.image, {"test_case": values}

    def attach_views(self, realistic_image: np.ndarray | None, features: np.ndarray | None) -> None:
        """The image stage's products for this episode (before the step), as the urban pack's env takes them."""
        self.realistic_image = EMPTY_U8 if realistic_image is None else realistic_image
        self.features = np.zeros((0,), dtype=np.float32) if features is None else features.astype(np.float32)

    def translator_input(self) -> np.ndarray:
        return self.label_map

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        predictions = np.asarray(action, dtype=np.uint8)
        if predictions.ndim == 2:
            predictions = predictions[None]
        self.prediction_simulated = predictions[0]
        self.prediction_realistic = predictions[1] if len(predictions) > 1 else EMPTY_U8
        return self.image, 0.0, True, False, {}

    def signal(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self, name))  # the contract's dtypes (uint8 maps), not float64


class AirSimCarEnv(AirSimEnv):
    """A driving episode on the host's car (module docstring)."""

    def __init__(
        self,
        endpoint: str | Sequence[str],
        road: Mapping[str, Any],
        step_seconds: float = 0.1,
        min_throttle: float = 0.0,
        max_throttle: float = 1.0,
        end_radius: float = 3.0,
        crash_reward: float = -10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(endpoint, **kwargs)
        try:
            centre = np.asarray(road["centre_line"], dtype=np.float64)
            self.half_width = float(road["half_width"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"airsim road needs centre_line [[x, y], ...] and half_width (m) ({exc})") from None
        if centre.ndim != 2 or centre.shape[1] != 2 or len(centre) < 2 or not self.half_width > 0:
            raise ValueError("airsim road: centre_line needs at least two [x, y] points and half_width > 0")
        if not -1.0 <= min_throttle < max_throttle <= 1.0:
            raise ValueError(
                f"airsim throttle range must be -1 <= min < max <= 1, got [{min_throttle}, {max_throttle}]"
            )
        if not step_seconds > 0:
            raise ValueError(f"airsim step_seconds must be > 0, got {step_seconds}")
        self.centre_line = centre
        self.step_seconds, self.end_radius, self.crash_reward = float(step_seconds), float(end_radius), crash_reward
        self.action_space = gym.spaces.Box(
            np.array([-1.0, min_throttle], dtype=np.float32),
            np.array([1.0, max_throttle], dtype=np.float32),
            dtype=np.float32,
        )
        self._clear()

    def _clear(self) -> None:
        self.speed = 0.0
        self.position = np.zeros(2)
        self.lane_distance = 0.0
        self.max_lane_distance = 0.0
        self.lane_limit = self.half_width
        self.collision = False
        self.off_road = False
        self.reached_end = False
        self._collision_stamp: Any = None
        self._progress = 0.0

    def distance_to_road(self, point: np.ndarray) -> tuple[float, float]:
        """(distance to the centre line, arc length of the nearest point along it)."""
        a, b = self.centre_line[:-1], self.centre_line[1:]
        seg = b - a
        lengths = np.maximum(np.einsum("ij,ij->i", seg, seg), 1e-12)
        t = np.clip(np.einsum("ij,ij->i", point - a, seg) / lengths, 0.0, 1.0)
        nearest = a + t[:, None] * seg
        d = np.linalg.norm(point - nearest, axis=1)
        k = int(np.argmin(d))
        along = float(np.sum(np.sqrt(lengths[:k])) + t[k] * math.sqrt(lengths[k]))
        return float(d[k]), along

    def start(self, scene: SceneSetting) -> np.ndarray:
        client = self.client()
        airsim = airsim_module()
        self.call("reset", client.reset)
        self.call("enableApiControl", lambda: client.enableApiControl(True, self.vehicle))
        self.place(client, scene)
        self.call("setCarControls", lambda: client.setCarControls(airsim.CarControls(0.0, 0.0), self.vehicle))
        self.call("simPause", lambda: client.simPause(True))
        self._clear()
        info = self.call("simGetCollisionInfo", lambda: client.simGetCollisionInfo(self.vehicle))
        self._collision_stamp = info.time_stamp if info.has_collided else None  # contact left over from the reset
        self._read_state(client)
        (self._image,) = self.capture(client, segmentation=False)
        return self._image.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)  # Unreal is not seedable: campaigns repeat inputs for a majority verdict instead
        scene = (options or {}).get("scene")
        if not isinstance(scene, SceneSetting):
            raise ValueError("AirSimCarEnv.reset needs options={'scene': SceneSetting(...)}")
        return self.start(scene), {}

    def _read_state(self, client: Any) -> None:
        state = self.call("getCarState", lambda: client.getCarState(self.vehicle))
        position = self.call("getCarState", lambda: state.kinematics_estimated.position)
        self.speed = float(self.call("getCarState", lambda: float(state.speed)))
        self.position = np.array(
            self.call("getCarState", lambda: [float(position.x_val), float(position.y_val)]), dtype=np.float64
        )
        self.lane_distance, self._progress = self.distance_to_road(self.position)
        self.max_lane_distance = max(self.max_lane_distance, self.lane_distance)

    def _advance(self, client: Any) -> None:
        """simContinueForTime runs the paused simulation for step_seconds; wait until it has paused again."""
        self.call("simContinueForTime", lambda: client.simContinueForTime(self.step_seconds))
        deadline = time.monotonic() + self.call_timeout_s
        while not self.call("simIsPause", client.simIsPause):
            if time.monotonic() > deadline:
                raise HostUnavailable(
                    f"the AirSim host at {self.endpoint} did not pause again within {self.call_timeout_s:g} s after "
                    f"simContinueForTime({self.step_seconds:g})"
                )
            time.sleep(0.002)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._conn is None or self._conn.closed:
            raise HostUnavailable(f"no open episode on the AirSim host at {self.endpoint}; reset first")
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (2,):
            raise ValueError(f"an AirSim car action is (steering, throttle), got shape {np.shape(action)}")
        box = self.action_space
        assert isinstance(box, gym.spaces.Box)  # set in __init__; narrows the type for the clip
        steering, throttle = np.clip(a, box.low, box.high)
        client = self._client
        airsim = airsim_module()
        controls = airsim.CarControls(float(throttle), float(steering))
        self.call("setCarControls", lambda: client.setCarControls(controls, self.vehicle))
        before = self._progress
        self._advance(client)
        self._read_state(client)
        info = self.call("simGetCollisionInfo", lambda: client.simGetCollisionInfo(self.vehicle))
        self.collision = bool(info.has_collided) and info.time_stamp != self._collision_stamp
        self.off_road = self.lane_distance > self.half_width
        end = self.centre_line[-1]
        self.reached_end = bool(np.linalg.norm(self.position - end) <= self.end_radius)
        (self._image,) = self.capture(client, segmentation=False)
        failed = self.collision or self.off_road
        reward = self.crash_reward if failed else self._progress - before
        details = {"speed": self.speed, "is_success": bool(self.reached_end and not failed)}
        return self._image.copy(), float(reward), bool(failed or self.reached_end), False, details


def scene_reader(subject: Subject) -> Callable[[Mapping[str, ParamValue]], SceneSetting]:
    """How the subject's test inputs set the scene: its ``injector`` (kind ``airsim_scene``) names the parameters.

    Options: ``pose`` {x, y, yaw: parameter names} (default the same names), ``weather`` {airsim weather
    parameter: parameter name}, ``time_of_day``: a parameter name (hours).
    """
    options = subject.injector
    names = subject.space.names
    pose = {"x": "x", "y": "y", "yaw": "yaw", **dict(options.get("pose") or {})}
    weather = {str(k).lower(): str(v) for k, v in dict(options.get("weather") or {}).items()}
    hour = options.get("time_of_day")
    unknown = [w for w in weather if w not in WEATHER]
    if unknown:
        raise ValueError(f"subject {subject.name}: unknown AirSim weather parameter(s) {unknown}; known: {WEATHER}")
    missing = [p for p in [*pose.values(), *weather.values(), *([hour] if hour else [])] if p not in names]
    if missing:
        raise ValueError(f"subject {subject.name}: injector airsim_scene names parameters it lacks: {missing}")

    def scene_of(values: Mapping[str, ParamValue]) -> SceneSetting:
        number = {k: float(v) for k, v in values.items() if isinstance(v, (int, float))}
        return SceneSetting(
            number[pose["x"]],
            number[pose["y"]],
            number[pose["yaw"]],
            {w: number[p] for w, p in weather.items()},
            number[str(hour)] if hour else None,
        )

    return scene_of


def scene_injector(subject: Subject, options: Mapping[str, Any]) -> Callable[..., np.ndarray]:
    """Injector ``airsim_scene`` (driving envs): the test input's pose and scene through ``scene_reader``."""
    scene_of = scene_reader(subject)

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        obs, _ = env.unwrapped.reset(seed=seed, options={"scene": scene_of(values)})
        return obs

    return inject


def make_env(subject: Subject, render_mode: str | None = None) -> gym.Env:
    """The subject's env (its ``env_id``: capture or car) on the hosts of $GAUNTLET_AIRSIM_ENDPOINT or env_kwargs."""
    kinds = ("capture", "car")
    if subject.env_id not in kinds:
        raise ValueError(
            f"subject {subject.name}: airsim env_id must be one of {', '.join(kinds)}, got {subject.env_id!r}"
        )
    kwargs = dict(subject.env_kwargs)
    endpoint = os.environ.get(ENDPOINT_ENV) or kwargs.get("endpoint")
    kwargs.pop("endpoint", None)
    if not endpoint:
        raise ValueError(
            f"subject {subject.name}: no AirSim host; set ${ENDPOINT_ENV}=host:port[,host:port] or "
            "env_kwargs.endpoint in the subject file"
        )
    try:
        if subject.env_id == "car":
            return RemoteSubjectEnv(AirSimCarEnv(endpoint, render_mode=render_mode, **kwargs), subject)
        # captures keep the image contract's own reset and signal dtypes: no SubjectEnv around them
        lanes = [v.options.get("lanes") for v in subject.validators if v.kind == "road_lanes"]
        return AirSimCaptureEnv(
            endpoint,
            scene_of=scene_reader(subject),
            lanes=parse_lanes(lanes[0]) if lanes else (),
            render_mode=render_mode,
            **kwargs,
        )
    except TypeError as exc:
        raise ValueError(f"subject {subject.name}: env_kwargs do not fit the airsim backend ({exc})") from None
