"""A deterministic procedural 3-D scene and its pinhole camera, in numpy: DESIGNATE's simulator, scaled to a CPU.

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations" (DESIGNATE, Sections III-IV) places the
ego camera in AirSim (urban) or MarsSim (Mars) and grabs an RGB image with its ground-truth segmentation. Here a
scene is a fixed layout of axis-aligned boxes (buildings, cars, trees) and half-buried spheres (Mars rocks) over a
flat ground whose class depends on (x, y) (road, sidewalk, lawn; soil, sand, bedrock). A camera pose (x, y, yaw,
pitch) casts one ray per pixel; the nearest hit gives the pixel's class and a flat-shaded colour (the simulator's
look: uniform class colours, face shading, distance haze). Moving or turning the camera changes what is seen and
how large: a car a metre ahead fills the image (the paper's close-ups).

The layout is a pure function of (kind, layout_seed): the simulator's subject uses one layout, the "real-world"
training data (offline/real_domain.py) other layouts, as the paper's AirSim towns differ from Cityscapes' cities.

Class tables (index = value in the label map; the subject YAML declares the same list and the backend checks it):
    urban: road, sidewalk, building, vegetation, sky, car
    mars:  soil, sand, bedrock, big_rock, sky
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

URBAN_CLASSES = ("road", "sidewalk", "building", "vegetation", "sky", "car")
MARS_CLASSES = ("soil", "sand", "bedrock", "big_rock", "sky")
CLASSES = {"urban": URBAN_CLASSES, "mars": MARS_CLASSES}

# The urban map: a main road along x and a cross street along y at x = CROSS_X (metres). The road-lane validity
# rule of the urban subject (lanes.py) lists the drivable part of these rectangles.
ROAD_HALF_WIDTH = 4.0
SIDEWALK_WIDTH = 2.5
CROSS_X = 40.0
NEAR = 0.05  # metres: hits closer than this along a ray are ignored (the camera is inside the box)

# Simulator colours (RGB) per class: AirSim-like flat materials.
URBAN_COLOURS = np.array(
    [[90, 90, 96], [170, 165, 150], [150, 120, 100], [60, 140, 60], [150, 190, 235], [200, 40, 40]], dtype=np.float32
)
MARS_COLOURS = np.array(
    [[170, 110, 70], [205, 160, 110], [120, 80, 60], [90, 60, 45], [215, 180, 150]], dtype=np.float32
)


@dataclass(frozen=True)
class Box:
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]
    label: int
    colour: tuple[float, float, float]


@dataclass(frozen=True)
class Sphere:
    centre: tuple[float, float, float]
    radius: float
    label: int
    colour: tuple[float, float, float]


@dataclass(frozen=True)
class Scene:
    kind: str  # "urban" or "mars"
    layout_seed: int
    boxes: tuple[Box, ...]
    spheres: tuple[Sphere, ...]

    @property
    def classes(self) -> tuple[str, ...]:
        return CLASSES[self.kind]

    @property
    def sky(self) -> int:
        return self.classes.index("sky")


@dataclass(frozen=True)
class Camera:
    height: int = 64
    width: int = 128
    fov_deg: float = 90.0  # horizontal
    elevation: float = 1.6  # metres above the ground


def build_scene(kind: str, layout_seed: int) -> Scene:
    """The fixed layout of one scene; the same (kind, layout_seed) always gives the same scene."""
    if kind == "urban":
        return _urban(layout_seed)
    if kind == "mars":
        return _mars(layout_seed)
    raise ValueError(f"scene kind must be one of {', '.join(CLASSES)}, got {kind!r}")


def _urban(seed: int) -> Scene:
    rng = np.random.default_rng([16, seed])
    road, sidewalk, building, vegetation, _, car = range(6)
    boxes: list[Box] = []
    edge = ROAD_HALF_WIDTH + SIDEWALK_WIDTH  # where buildings may start

    def facade_colour() -> tuple[float, float, float]:
        return tuple(float(v) for v in URBAN_COLOURS[building] * rng.uniform(0.8, 1.15, 3))  # type: ignore[return-value]

    # buildings along both sides of the main road, leaving the cross street's corridor free
    for side in (-1.0, 1.0):
        x = -40.0
        while x < 130.0:
            length = float(rng.uniform(8.0, 16.0))
            if not (x + length > CROSS_X - edge and x < CROSS_X + edge):
                depth, height = float(rng.uniform(8.0, 14.0)), float(rng.uniform(6.0, 22.0))
                y0 = edge + float(rng.uniform(0.5, 3.0))
                lo, hi = (x, y0, 0.0), (x + length, y0 + depth, height)
                if side < 0:
                    lo, hi = (x, -y0 - depth, 0.0), (x + length, -y0, height)
                boxes.append(Box(lo, hi, building, facade_colour()))
            x += length + float(rng.uniform(1.0, 6.0))
    # buildings along the cross street (beyond the main road's sidewalks)
    for side in (-1.0, 1.0):
        y = edge + 1.0
        while y < 80.0:
            length = float(rng.uniform(8.0, 16.0))
            depth, height = float(rng.uniform(8.0, 14.0)), float(rng.uniform(6.0, 22.0))
            x0 = CROSS_X + side * (edge + float(rng.uniform(0.5, 3.0)))
            xs = (x0, x0 + depth) if side > 0 else (x0 - depth, x0)
            for sy in (-1.0, 1.0):
                ys = (y, y + length) if sy > 0 else (-y - length, -y)
                boxes.append(Box((xs[0], ys[0], 0.0), (xs[1], ys[1], height), building, facade_colour()))
            y += length + float(rng.uniform(1.0, 6.0))
    # street trees on the sidewalks' outer edge
    for side in (-1.0, 1.0):
        for x in np.arange(-30.0, 120.0, 9.0):
            if abs(x - CROSS_X) < edge + 1.0 or rng.random() < 0.35:
                continue
            cx, cy, r = float(x + rng.uniform(-2, 2)), side * (ROAD_HALF_WIDTH + SIDEWALK_WIDTH - 0.8), 0.7
            h = float(rng.uniform(3.5, 6.0))
            green = tuple(float(v) for v in URBAN_COLOURS[vegetation] * rng.uniform(0.8, 1.2, 3))
            boxes.append(Box((cx - r, cy - r, 0.0), (cx + r, cy + r, h), vegetation, green))  # type: ignore[arg-type]
    # cars: parked at the kerbs and driving in the lanes of both streets (a car is 4.4 x 1.8 x 1.5 m)
    length, width, height = 4.4, 1.8, 1.5

    def add_car(cx: float, cy: float, along_x: bool) -> None:
        hx, hy = (length / 2, width / 2) if along_x else (width / 2, length / 2)
        paint = tuple(
            float(v) for v in np.clip(rng.uniform(0.4, 1.25, 3) * URBAN_COLOURS[car] + rng.uniform(0, 90), 0, 255)
        )
        boxes.append(Box((cx - hx, cy - hy, 0.0), (cx + hx, cy + hy, height), car, paint))  # type: ignore[arg-type]

    for side in (-1.0, 1.0):
        x = float(rng.uniform(-30.0, -20.0))
        while x < 120.0:
            if abs(x - CROSS_X) > ROAD_HALF_WIDTH + 4.0 and rng.random() < 0.6:
                add_car(x, side * (ROAD_HALF_WIDTH - 1.1), True)
            x += float(rng.uniform(6.0, 18.0))
        for _ in range(3):  # in the lanes
            add_car(float(rng.uniform(-10.0, 95.0)), side * 1.9, True)
        for _ in range(2):  # on the cross street
            add_car(CROSS_X + side * 1.9, float(rng.uniform(-35.0, 35.0)), False)
    return Scene("urban", seed, tuple(boxes), ())


def _mars(seed: int) -> Scene:
    rng = np.random.default_rng([17, seed])
    big_rock = MARS_CLASSES.index("big_rock")
    spheres = []
    for _ in range(140):
        r = float(rng.uniform(0.3, 2.2))
        cx, cy = (float(v) for v in rng.uniform(-50.0, 50.0, 2))
        cz = float(-r * rng.uniform(0.2, 0.6))  # half-buried
        shade = tuple(float(v) for v in MARS_COLOURS[big_rock] * rng.uniform(0.8, 1.25, 3))
        spheres.append(Sphere((cx, cy, cz), r, big_rock, shade))  # type: ignore[arg-type]
    return Scene("mars", seed, (), tuple(spheres))


def ground_labels(scene: Scene, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The ground's class at points (x, y): road/sidewalk/lawn (urban) or soil/sand/bedrock patches (Mars)."""
    if scene.kind == "urban":
        dist = np.minimum(np.abs(y), np.abs(x - CROSS_X))  # distance to the nearest street's centre line
        out = np.full(x.shape, 3, dtype=np.uint8)  # lawn (vegetation) beyond the sidewalks
        out[dist < ROAD_HALF_WIDTH + SIDEWALK_WIDTH] = 1
        out[dist < ROAD_HALF_WIDTH] = 0
        return out
    # Mars: a smooth field of fixed sines (phases from the layout seed) cut into soil / sand / bedrock
    phase = np.random.default_rng([18, scene.layout_seed]).uniform(0, 2 * math.pi, 4)
    field = (
        np.sin(0.11 * x + phase[0]) * np.cos(0.07 * y + phase[1])
        + 0.6 * np.sin(0.23 * x - 0.19 * y + phase[2])
        + 0.4 * np.cos(0.05 * x + 0.31 * y + phase[3])
    )
    out = np.zeros(x.shape, dtype=np.uint8)  # soil
    out[field > 0.55] = 1  # sand
    out[field < -0.75] = 2  # bedrock
    return out


def camera_rays(camera: Camera, yaw_deg: float, pitch_deg: float) -> np.ndarray:
    """Unit ray directions, shape (height * width, 3), row-major from the top-left pixel."""
    yaw, pitch = math.radians(yaw_deg), math.radians(pitch_deg)
    focal = (camera.width / 2) / math.tan(math.radians(camera.fov_deg) / 2)
    cols = (np.arange(camera.width) + 0.5 - camera.width / 2) / focal
    rows = (camera.height / 2 - np.arange(camera.height) - 0.5) / focal
    forward = np.array([math.cos(pitch) * math.cos(yaw), math.cos(pitch) * math.sin(yaw), math.sin(pitch)])
    right = np.array([math.sin(yaw), -math.cos(yaw), 0.0])
    up = np.array([-math.sin(pitch) * math.cos(yaw), -math.sin(pitch) * math.sin(yaw), math.cos(pitch)])
    u, v = np.meshgrid(cols, rows)
    dirs = forward[None, :] + u.reshape(-1, 1) * right[None, :] + v.reshape(-1, 1) * up[None, :]
    return dirs / np.linalg.norm(dirs, axis=1, keepdims=True)


@dataclass(frozen=True)
class Rendering:
    image: np.ndarray  # uint8 (height, width, 3): the simulator's flat-shaded RGB
    labels: np.ndarray  # uint8 (height, width): class index per pixel
    depth: np.ndarray  # float32 (height, width): horizontal metres to the hit (inf for sky)
    shade: np.ndarray  # float32 (height, width): the face-orientation factor the image used


def render(scene: Scene, camera: Camera, x: float, y: float, yaw_deg: float, pitch_deg: float = 0.0) -> Rendering:
    """Renders the scene from the camera at (x, y, camera.elevation) looking along (yaw, pitch), in degrees."""
    origin = np.array([x, y, camera.elevation])
    dirs = camera_rays(camera, yaw_deg, pitch_deg)
    n = len(dirs)
    depth = np.full(n, np.inf)
    labels = np.full(n, scene.sky, dtype=np.uint8)
    colour = np.zeros((n, 3), dtype=np.float32)
    shade = np.ones(n, dtype=np.float32)

    down = dirs[:, 2] < -1e-6
    t_ground = np.where(down, -origin[2] / np.where(down, dirs[:, 2], -1.0), np.inf)
    hit = np.isfinite(t_ground)
    gx, gy = origin[0] + t_ground[hit] * dirs[hit, 0], origin[1] + t_ground[hit] * dirs[hit, 1]
    horizontal = np.linalg.norm(dirs[:, :2], axis=1)
    depth[hit] = t_ground[hit] * horizontal[hit]  # depths are horizontal distances (see _boxes_level)
    labels[hit] = ground_labels(scene, gx, gy)
    palette = URBAN_COLOURS if scene.kind == "urban" else MARS_COLOURS
    colour[hit] = palette[labels[hit]]

    if scene.boxes:
        hit_boxes = _boxes_level if abs(pitch_deg) < 1e-9 else _boxes_any
        hit_boxes(scene, camera, origin, dirs, depth, labels, colour, shade)
    for s in scene.spheres:
        oc = origin - np.array(s.centre)
        b = dirs @ oc
        disc = b * b - (oc @ oc - s.radius**2)
        ok = disc >= 0
        t = np.where(ok, -b - np.sqrt(np.where(ok, disc, 0.0)), np.inf)
        t = np.where(t > NEAR, t, np.inf)
        closer = t * horizontal < depth
        if closer.any():
            depth[closer] = t[closer] * horizontal[closer]
            labels[closer] = s.label
            colour[closer] = s.colour
            normal = (origin + t[closer, None] * dirs[closer]) - np.array(s.centre)
            shade[closer] = 0.55 + 0.45 * np.clip(normal[:, 2] / s.radius, 0.0, 1.0)
    sky = palette[scene.sky]
    haze = (1.0 - np.exp(-np.where(np.isfinite(depth), depth, 1e6) / 180.0)).astype(np.float32)[:, None]
    rgb = colour * shade[:, None] * (1 - haze) + sky * haze
    is_sky = labels == scene.sky
    rgb[is_sky] = sky
    h, w = camera.height, camera.width
    return Rendering(
        image=np.clip(rgb, 0, 255).round().astype(np.uint8).reshape(h, w, 3),
        labels=labels.reshape(h, w),
        depth=depth.astype(np.float32).reshape(h, w),
        shade=shade.reshape(h, w),
    )


def _boxes_level(
    scene: Scene,
    camera: Camera,
    origin: np.ndarray,
    dirs: np.ndarray,
    depth: np.ndarray,
    labels: np.ndarray,
    colour: np.ndarray,
    shade: np.ndarray,
) -> None:
    """Paints the nearest box hit per pixel for a level camera (pitch 0), in place.

    Every box stands on the ground, so with a level camera all pixels of one column share the ray's horizontal
    direction: one 2-D slab test per (box, column) gives the horizontal entry/exit distances, and each pixel only
    checks the height its ray has there. About ten times cheaper than the 3-D slab test of `_boxes_any`.
    Distances compared are horizontal (as the ground's and the spheres' are converted below).
    """
    h, w = camera.height, camera.width
    d = dirs.reshape(h, w, 3)
    horiz = d[0, :, :2] / np.linalg.norm(d[0, :, :2], axis=1, keepdims=True)  # (w, 2): the same in every row
    lo = np.array([b.lo for b in scene.boxes])
    hi = np.array([b.hi for b in scene.boxes])
    safe = np.where(np.abs(horiz) < 1e-9, 1e-9, horiz)
    t0 = (lo[:, None, :2] - origin[:2]) / safe[None]  # (boxes, w, 2)
    t1 = (hi[:, None, :2] - origin[:2]) / safe[None]
    near_side = np.minimum(t0, t1)
    s_in = near_side.max(axis=2)
    s_out = np.maximum(t0, t1).min(axis=2)
    seen = (s_out >= np.maximum(s_in, NEAR)).any(axis=1)  # boxes some column's ray crosses
    if not seen.any():
        return
    keep = np.nonzero(seen)[0]
    s_in, s_out, near_side = s_in[keep], s_out[keep], near_side[keep]
    tops = hi[keep, 2]
    # height of the ray per unit of horizontal distance, per pixel (never exactly 0: see the interval below)
    slope = d[:, :, 2] / np.linalg.norm(d[:, :, :2], axis=2)
    slope = np.where(np.abs(slope) < 1e-12, 1e-12, slope)
    inv = 1.0 / slope  # (h, w)
    # horizontal distances where the ray's height lies in [0, top]: between a (height 0) and b (height top)
    a = (-origin[2] * inv)[None]
    b = (tops[:, None, None] - origin[2]) * inv[None]
    z_lo, z_hi = np.minimum(a, b), np.maximum(a, b)
    enter = np.maximum(np.maximum(s_in[:, None, :], z_lo), NEAR)  # (boxes, h, w)
    leave = np.minimum(s_out[:, None, :], z_hi)
    dist = np.where(enter <= leave, enter, np.inf)
    best = dist.argmin(axis=0)  # (h, w)
    rows, cols = np.indices((h, w))
    nearest = dist[best, rows, cols]
    flat_depth = depth.reshape(h, w)
    closer = nearest < flat_depth
    if not closer.any():
        return
    k = best[closer]
    which = keep[k]
    flat_depth[closer] = nearest[closer]
    labels.reshape(h, w)[closer] = np.array([b.label for b in scene.boxes], dtype=np.uint8)[which]
    colour.reshape(h, w, 3)[closer] = np.array([b.colour for b in scene.boxes], dtype=np.float32)[which]
    cc = cols[closer]
    through_top = nearest[closer] > s_in[k, cc] + 1e-9  # entered through the roof, not a wall
    axis = near_side[k, cc].argmax(axis=1)
    shade.reshape(h, w)[closer] = np.where(through_top, 1.0, np.array([0.8, 0.62], dtype=np.float32)[axis])


def _boxes_any(
    scene: Scene,
    camera: Camera,
    origin: np.ndarray,
    dirs: np.ndarray,
    depth: np.ndarray,
    labels: np.ndarray,
    colour: np.ndarray,
    shade: np.ndarray,
) -> None:
    """Paints the nearest box hit per pixel for any camera pitch (a 3-D slab test per box and pixel), in place.

    Distances are horizontal, like `_boxes_level`'s.
    """
    n = len(dirs)
    lo = np.array([b.lo for b in scene.boxes])
    hi = np.array([b.hi for b in scene.boxes])
    safe = np.where(np.abs(dirs) < 1e-9, 1e-9, dirs)
    t0 = (lo[:, None, :] - origin) / safe[None]  # (boxes, n, 3)
    t1 = (hi[:, None, :] - origin) / safe[None]
    tmin3 = np.minimum(t0, t1)
    t_enter = tmin3.max(axis=2)
    t_exit = np.maximum(t0, t1).min(axis=2)
    t_hit = np.where((t_exit >= np.maximum(t_enter, NEAR)), np.maximum(t_enter, NEAR), np.inf)
    best = t_hit.argmin(axis=0)
    horizontal = np.linalg.norm(dirs[:, :2], axis=1)
    t_best = t_hit[best, np.arange(n)] * horizontal
    closer = t_best < depth
    if closer.any():
        pix = np.nonzero(closer)[0]
        depth[pix] = t_best[pix]
        labels[pix] = np.array([b.label for b in scene.boxes], dtype=np.uint8)[best[pix]]
        colour[pix] = np.array([b.colour for b in scene.boxes], dtype=np.float32)[best[pix]]
        axis = tmin3[best[pix], pix].argmax(axis=1)
        shade[pix] = np.array([0.8, 0.62, 1.0], dtype=np.float32)[axis]


def on_urban_road(x: float, y: float, margin: float = 0.5) -> bool:
    """True when (x, y) lies on a street (the ego's lane area), `margin` metres inside its kerbs."""
    return abs(y) <= ROAD_HALF_WIDTH - margin or abs(x - CROSS_X) <= ROAD_HALF_WIDTH - margin
