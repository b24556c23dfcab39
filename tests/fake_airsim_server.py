"""A toy AirSim host speaking msgpack-rpc over real TCP, for testing the airsim backend without Unreal.

It answers the subset of AirSim's RPC API that the backend calls, with the argument layouts the airsim 1.8.1
client sends (objects as maps of their fields): ping, getServerVersion, getMinRequiredClientVersion,
enableApiControl, reset, simSetVehiclePose, simEnableWeather, simSetWeatherParameter, simSetTimeOfDay,
simSetSegmentationObjectID, simGetImages (PNG Scene and Segmentation images), setCarControls, getCarState,
simGetCollisionInfo, simPause, simIsPause, simContinueForTime.

The world: a straight road along +x (centre y = 0, ``road_half_width``), sidewalks beside it, buildings beyond
them, trees at some bearings, a sky, and parked cars (``obstacles``). Images are drawn from the vehicle's pose by
a crude per-column ray cast, so what the camera sees changes with x, y and yaw; the segmentation image paints
each mesh in AirSim's colour of the object id the client set for its name (the first matching pattern wins, in
the order the client set them, as AirSim's regex sets do). The car is kinematic: speed = throttle * top_speed,
yaw rate = steering * turn_rate. It is NOT a physics or rendering model of AirSim: it exists so the tests
exercise the real protocol path.

Faults: ``delay_s`` delays every response, ``split`` sends each response in small TCP writes, ``drop_after``
closes the connection at that call (counted over the server's life) and stops listening (the host is gone),
``malformed_method`` answers that method with ``malformed`` ("garbage": bytes that are not msgpack; "shape": a
well-formed response whose result the airsim client cannot decode), ``server_version`` sets the API version.
"""

from __future__ import annotations

import io
import math
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
from PIL import Image

from tests.fake_tcp_host import FakeTcpHost

# AirSim's segmentation palette (its seg_rgbs.txt), ids 0..10: the colour the Segmentation image shows per id
PALETTE = [
    (0, 0, 0),
    (153, 108, 6),
    (112, 105, 191),
    (89, 121, 72),
    (190, 225, 64),
    (206, 190, 59),
    (81, 13, 36),
    (115, 176, 195),
    (161, 171, 27),
    (135, 169, 180),
    (29, 26, 199),
]
# mesh name -> the colour its class has in the Scene image (before lighting)
MESHES = {
    "Road_Main": (90, 90, 95),
    "Sidewalk_North": (170, 165, 150),
    "Building_Block": (150, 100, 80),
    "Tree_Oak": (40, 120, 40),
    "SkySphere": (120, 170, 230),
    "Car_Parked": (200, 30, 30),
}


@dataclass
class FakeAirSimServer(FakeTcpHost):
    width: int = 96
    height: int = 64
    road_half_width: float = 4.0
    sidewalk_width: float = 3.0
    obstacles: list[tuple[float, float]] = field(default_factory=lambda: [(60.0, 0.0)])
    car_radius: float = 2.0
    top_speed: float = 10.0
    turn_rate: float = 0.5  # rad/s at full steering
    delay_s: float = 0.0
    split: bool = False
    drop_after: int | None = None
    malformed_method: str | None = None
    malformed: str = "garbage"
    server_version: int = 1
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listen(backlog=8)
        self._lock = threading.Lock()
        self.segmentation_ids: list[tuple[str, int]] = []
        self.weather: dict[int, float] = {}
        self.time_of_day = ""
        self._reset_car()
        self._start_serving()

    # -- serving ---------------------------------------------------------------------------------------------
    def _accepted(self, conn: socket.socket) -> None:  # a thread per client: several envs lease one host
        threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        unpacker = msgpack.Unpacker(raw=False)
        conn.settimeout(0.1)
        with conn:
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                unpacker.feed(chunk)
                for request in unpacker:
                    if not self._answer(conn, request):
                        return

    def _answer(self, conn: socket.socket, request: Any) -> bool:
        _, msgid, method, args = request
        with self._lock:
            self.calls.append(method)
            count = len(self.calls)
        if self.drop_after is not None and count > self.drop_after:
            self._server.close()  # the host is gone: no new connections either
            conn.shutdown(socket.SHUT_RDWR)
            return False
        if method == self.malformed_method and self.malformed == "garbage":
            self._write(conn, b"\xc1\xc1 not msgpack-rpc \xc1")
            return True
        try:
            result, error = getattr(self, f"rpc_{method}")(*args), None
        except AttributeError:
            result, error = None, f"rpclib: server could not find function '{method}' with argument count {len(args)}."
        if method == self.malformed_method:  # "shape": a valid response the client cannot decode
            result = {"unexpected": {"nested": 1}} if isinstance(result, dict) else [{"image_data_uint8": 7}]
        if self.delay_s:
            time.sleep(self.delay_s)
        self._write(conn, msgpack.packb([1, msgid, error, result], use_bin_type=True))
        return True

    def _write(self, conn: socket.socket, data: bytes) -> None:
        if not self.split:
            conn.sendall(data)
            return
        for start in range(0, len(data), 1000):
            conn.sendall(data[start : start + 1000])
            time.sleep(0.001)

    # -- the API ---------------------------------------------------------------------------------------------
    def rpc_ping(self) -> bool:
        return True

    def rpc_getServerVersion(self) -> int:
        return self.server_version

    def rpc_getMinRequiredClientVersion(self) -> int:
        return 1

    def rpc_enableApiControl(self, enabled: bool, vehicle: str) -> None:
        self.api_control = bool(enabled)

    def rpc_reset(self) -> None:
        self._reset_car()

    def rpc_simSetVehiclePose(self, pose: dict, ignore_collision: bool, vehicle: str) -> None:
        p, q = pose["position"], pose["orientation"]
        self.x, self.y = float(p["x_val"]), float(p["y_val"])
        w, z = float(q["w_val"]), float(q["z_val"])
        self.yaw = 2 * math.atan2(z, w)
        self.contact = None

    def rpc_simEnableWeather(self, enabled: bool) -> None:
        self.weather_enabled = bool(enabled)

    def rpc_simSetWeatherParameter(self, param: int, value: float) -> None:
        self.weather[int(param)] = float(value)

    def rpc_simSetTimeOfDay(self, enabled: bool, start: str, *rest: Any) -> None:
        self.time_of_day = start

    def rpc_simSetSegmentationObjectID(self, pattern: str, object_id: int, is_regex: bool) -> bool:
        self.segmentation_ids.append((pattern, int(object_id)))
        return any(re.fullmatch(pattern, name) for name in MESHES)

    def rpc_setCarControls(self, controls: dict, vehicle: str) -> None:
        self.throttle, self.steering = float(controls["throttle"]), float(controls["steering"])

    def rpc_simPause(self, paused: bool) -> None:
        self.paused = bool(paused)

    def rpc_simIsPaused(self) -> bool:
        return self.paused

    def rpc_simContinueForTime(self, seconds: float) -> None:
        steps = max(int(round(seconds / 0.02)), 1)
        dt = seconds / steps
        for _ in range(steps):
            self.speed = max(self.throttle, 0.0) * self.top_speed
            self.yaw += self.steering * self.turn_rate * dt
            self.x += self.speed * math.cos(self.yaw) * dt
            self.y += self.speed * math.sin(self.yaw) * dt
            self.time += dt
            for ox, oy in self.obstacles:
                if math.hypot(self.x - ox, self.y - oy) < self.car_radius and self.contact is None:
                    self.contact = ("Car_Parked", self.time, (ox, oy))
        self.paused = True

    def rpc_getCarState(self, vehicle: str) -> dict:
        vector = {"x_val": 0.0, "y_val": 0.0, "z_val": 0.0}
        return {
            "speed": self.speed,
            "gear": 1,
            "rpm": 0.0,
            "maxrpm": 7500.0,
            "handbrake": False,
            "kinematics_estimated": {
                "position": {"x_val": self.x, "y_val": self.y, "z_val": 0.0},
                "orientation": {
                    "w_val": math.cos(self.yaw / 2),
                    "x_val": 0.0,
                    "y_val": 0.0,
                    "z_val": math.sin(self.yaw / 2),
                },
                "linear_velocity": {**vector, "x_val": self.speed * math.cos(self.yaw)},
                "angular_velocity": vector,
                "linear_acceleration": vector,
                "angular_acceleration": vector,
            },
            "timestamp": int(self.time * 1e9),
        }

    def rpc_simGetCollisionInfo(self, vehicle: str) -> dict:
        vector = {"x_val": 0.0, "y_val": 0.0, "z_val": 0.0}
        hit = self.contact
        return {
            "has_collided": hit is not None,
            "normal": vector,
            "impact_point": vector,
            "position": vector,
            "penetration_depth": 0.0,
            "time_stamp": int(hit[1] * 1e9) if hit else 0,
            "object_name": hit[0] if hit else "",
            "object_id": -1,
        }

    def rpc_simGetImages(self, requests: list, vehicle: str, external: bool = False) -> list:
        meshes = self._ray_cast()
        out = []
        for request in requests:
            kind = int(request["image_type"])
            pixels = self._segmentation(meshes) if kind == 5 else self._scene(meshes)
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, format="PNG")
            out.append(
                {
                    "image_data_uint8": buffer.getvalue(),
                    "image_data_float": [],
                    "camera_position": {"x_val": self.x, "y_val": self.y, "z_val": -1.5},
                    "camera_orientation": {"w_val": 1.0, "x_val": 0.0, "y_val": 0.0, "z_val": 0.0},
                    "time_stamp": int(self.time * 1e9),
                    "message": "",
                    "pixels_as_float": False,
                    "compress": True,
                    "width": self.width,
                    "height": self.height,
                    "image_type": kind,
                }
            )
        return out

    # -- the toy world ---------------------------------------------------------------------------------------
    def _reset_car(self) -> None:
        self.x = self.y = self.yaw = self.speed = self.throttle = self.steering = self.time = 0.0
        self.paused = False
        self.contact: tuple[str, float, tuple[float, float]] | None = None

    def _ray_cast(self) -> np.ndarray:
        """Mesh index (into MESHES) per pixel: the ground ahead by row, buildings/trees/sky above the horizon."""
        names = list(MESHES)
        out = np.empty((self.height, self.width), dtype=np.int64)
        horizon = self.height // 2
        fov = math.radians(90)
        for col in range(self.width):
            bearing = self.yaw + (col / (self.width - 1) - 0.5) * fov
            for row in range(self.height):
                if row < horizon:
                    above = horizon - row
                    # buildings stand beyond the sidewalks; their height grows with how square-on the camera sees them
                    facing = abs(math.sin(bearing))
                    tree = math.cos(bearing * 7 + self.x * 0.1) > 0.8
                    if above < horizon * (0.25 + 0.6 * facing):
                        out[row, col] = names.index("Tree_Oak" if tree else "Building_Block")
                    else:
                        out[row, col] = names.index("SkySphere")
                    continue
                distance = 1.5 * horizon / max(row - horizon + 0.5, 0.5)  # camera 1.5 m up
                gx = self.x + distance * math.cos(bearing)
                gy = self.y + distance * math.sin(bearing)
                near_car = any(math.hypot(gx - ox, gy - oy) < self.car_radius for ox, oy in self.obstacles)
                if near_car:
                    out[row, col] = names.index("Car_Parked")
                elif abs(gy) <= self.road_half_width:
                    out[row, col] = names.index("Road_Main")
                elif abs(gy) <= self.road_half_width + self.sidewalk_width:
                    out[row, col] = names.index("Sidewalk_North")
                else:
                    out[row, col] = names.index("Building_Block")
        return out

    def _light(self) -> float:
        hour = int(self.time_of_day[11:13]) if len(self.time_of_day) >= 13 else 12
        return 0.35 + 0.65 * max(math.sin(math.pi * (hour - 6) / 12), 0.0)

    def _scene(self, meshes: np.ndarray) -> np.ndarray:
        colours = np.array(list(MESHES.values()), dtype=np.float64)[meshes] * self._light()
        fog = self.weather.get(7, 0.0)
        colours = (1 - fog) * colours + fog * 200.0
        return np.clip(colours, 0, 255).astype(np.uint8)

    def _segmentation(self, meshes: np.ndarray) -> np.ndarray:
        ids = []
        for name in MESHES:
            object_id = 0
            for pattern, given in self.segmentation_ids:  # later sets override earlier ones, as in AirSim
                if re.fullmatch(pattern, name):
                    object_id = given
            ids.append(object_id)
        palette = np.array([PALETTE[i % len(PALETTE)] for i in ids], dtype=np.uint8)
        return palette[meshes]
