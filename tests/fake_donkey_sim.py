"""A toy Donkey simulator speaking the DonkeySim JSON-over-TCP protocol, for testing the donkey backend.

It frames its messages as the Unity sim does (one JSON object per line, ``\\n``-terminated) and reads the
client's stream of concatenated JSON objects. It accepts Indago's ``regen_track`` (and echoes ``send_track``),
answers every ``control`` with one ``telemetry`` and drives a deterministic kinematic car along the track's
centre line: the car follows the road exactly on curves it can take (curvature <= ``car_max_curvature``) and
slides outward on sharper ones, so the cross-track error grows on sharp curves; steering moves it sideways.
It is NOT a physics model of the real sim: it exists so the tests exercise the real protocol path.

Fault injection: ``drop_after`` closes the connection after that many control messages; ``malformed_after``
answers with a line that is not JSON; ``echo_track=False`` ignores ``regen_track``; ``omit_field`` leaves a
field out of telemetry; ``split_frames`` sends every message in two TCP writes (the reader must reassemble it).
"""

from __future__ import annotations

import base64
import io
import json
import math
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from subjects.donkey.track import UNIT_LENGTH, centre_line, parse_track_string
from tests.fake_tcp_host import FakeTcpHost


@dataclass
class FakeDonkeySim(FakeTcpHost):
    drop_after: int | None = None
    malformed_after: int | None = None
    echo_track: bool = True
    omit_field: str | None = None
    split_frames: bool = False
    top_speed: float = 20.0  # m/s at throttle 1
    dt: float = 0.05  # s per control step
    car_max_curvature: float = 0.2  # 1/m: curves with a radius under 5 m make the car slide
    slide_gain: float = 1.0
    steer_gain: float = 0.5
    received: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listen(backlog=1)
        self._start_serving()

    # -- serving -----------------------------------------------------------------------------------------
    def _accepted(self, conn: socket.socket) -> None:  # one client at a time, as the Unity sim
        with conn:
            conn.settimeout(0.1)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._session(conn)

    def _send(self, conn: socket.socket, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else (json.dumps(message) + "\n").encode()
        if self.split_frames and len(data) > 8:
            conn.sendall(data[:7])
            time.sleep(0.002)
            conn.sendall(data[7:])
        else:
            conn.sendall(data)

    def _session(self, conn: socket.socket) -> None:
        decoder = json.JSONDecoder()
        buffer = ""
        self._controls = 0
        self._path: np.ndarray | None = None
        self._send(conn, {"msg_type": "scene_selection_ready"})
        while not self._stop.is_set():
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk.decode()
            while True:
                buffer = buffer.lstrip()
                if not buffer:
                    break
                try:
                    message, end = decoder.raw_decode(buffer)
                except json.JSONDecodeError:
                    break  # incomplete object: wait for more bytes
                buffer = buffer[end:]
                self.received.append(message)
                if not self._handle(conn, message):
                    return

    def _handle(self, conn: socket.socket, message: dict[str, Any]) -> bool:
        kind = message.get("msg_type")
        if kind == "load_scene":
            self._send(conn, {"msg_type": "need_car_config"})
            self._send(conn, {"msg_type": "car_loaded"})
        elif kind == "regen_track" and self.echo_track:
            self._build(str(message["track_string"]))
            self._send(conn, {"msg_type": "send_track", "track_string": message["track_string"]})
        elif kind == "reset_car":
            self._s, self._d, self._speed, self._node = 0.0, 0.0, 0.0, 0
            self._send(conn, self._telemetry())
        elif kind == "control":
            self._controls += 1
            if self.drop_after is not None and self._controls > self.drop_after:
                conn.shutdown(socket.SHUT_RDWR)
                return False
            if self.malformed_after is not None and self._controls > self.malformed_after:
                self._send(conn, b'{"msg_type": "telemetry", "cte": 0.1, oops\n')
                return True
            self._advance(float(message["steering"]), float(message["throttle"]))
            self._send(conn, self._telemetry())
        return True

    # -- the toy car -------------------------------------------------------------------------------------
    def _build(self, text: str) -> None:
        geometry = centre_line(parse_track_string(text))
        self._path = geometry.points
        seg = np.diff(self._path, axis=0)
        self._heading = np.arctan2(seg[:, 1], seg[:, 0])
        turn = np.diff(self._heading, prepend=self._heading[0])
        self._curvature = (turn + np.pi) % (2 * np.pi) - np.pi  # signed turn per segment, + = left
        self._curvature = self._curvature / UNIT_LENGTH

    def _advance(self, steering: float, throttle: float) -> None:
        assert self._path is not None
        self._speed = max(throttle, 0.0) * self.top_speed
        ds = self._speed * self.dt
        k = self._segment()
        kappa = float(self._curvature[k])
        excess = max(abs(kappa) - self.car_max_curvature, 0.0) / self.car_max_curvature
        # cte > 0 is right of the centre line: a left curve (kappa > 0) throws the car to the right
        self._d += ds * (self.slide_gain * excess * math.copysign(1.0, kappa) + self.steer_gain * steering)
        self._s += ds

    def _segment(self) -> int:
        return int(min(self._s // UNIT_LENGTH, len(self._heading) - 1))

    def _telemetry(self) -> dict[str, Any]:
        assert self._path is not None
        k = self._segment()
        frac = min(self._s / UNIT_LENGTH - k, 1.0)
        centre = self._path[k] + frac * (self._path[k + 1] - self._path[k])
        right = np.array([math.sin(self._heading[k]), -math.cos(self._heading[k])])
        x, z = centre + self._d * right
        ended = self._s >= len(self._heading) * UNIT_LENGTH
        hit = "none"
        if k > self._node:
            self._node = k
            hit = f"waypointline_{k}"
        message = {
            "msg_type": "telemetry",
            "image": self._image(),
            "cte": self._d,
            "pos_x": float(x),
            "pos_y": 0.5,
            "pos_z": float(z),
            "speed": self._speed,
            "hit": hit,
            "totalNodes": len(self._path),
            "material": "end_line" if ended else "road",
            "steering_angle": 0.0,
        }
        if self.omit_field:
            message.pop(self.omit_field, None)
        return message

    def _image(self) -> str:
        shade = int(np.clip(128 + 20 * self._d, 0, 255))
        pixels = np.full((120, 160, 3), shade, dtype=np.uint8)
        pixels[60:, 70:90] = (40, 40, 40)  # a road stripe
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="PNG")
        return base64.b64encode(out.getvalue()).decode()
