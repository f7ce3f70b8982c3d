"""The static part of a synthetic clip: camera, room, floor, barriers, table and net.

Painted once per clip (``paint_backdrop``); every frame starts from a copy of it. Images are
BGR uint8 (OpenCV order); pixel (row i, column j) has its centre at x = j, y = i.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import cv2
import numpy as np

from ttball.synth.physics import (
    FLOOR_Z,
    NET_HALF_WIDTH,
    NET_HEIGHT,
    TABLE_HALF_LENGTH,
    TABLE_HALF_WIDTH,
)

SIZES = ((1280, 720), (1920, 1080), (960, 540), (640, 360))
TABLE_COLOURS = {  # BGR; ITTF tables are blue or green, club tables also dark grey/black
    "blue": (120, 62, 22),
    "green": (52, 96, 34),
    "dark": (38, 36, 38),
}
FLOOR_COLOURS = ((40, 50, 125), (70, 70, 75), (55, 100, 150), (95, 75, 40), (45, 80, 45))
COURT = (3.8, 2.2)  # smallest half-sizes (x, y) of the court's barrier box, metres
SHIFT = 4  # fixed-point bits for sub-pixel OpenCV drawing
ONE = 1 << SHIFT


@dataclass(frozen=True)
class Camera:
    """Pinhole camera. ``rotation`` (3, 3) rows are the camera's right, down and forward axes in
    world coordinates; ``centre`` (3,) its position (metres); ``focal`` in pixels."""

    rotation: np.ndarray
    centre: np.ndarray
    focal: float
    width: int
    height: int
    view: str

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World points (..., 3) → pixel coordinates (..., 2) and depth (...) in metres."""
        cam = (np.asarray(points, dtype=np.float64) - self.centre) @ self.rotation.T
        depth = cam[..., 2]
        safe = np.where(depth > 1e-6, depth, 1e-6)
        uv = self.focal * cam[..., :2] / safe[..., None]
        uv[..., 0] += (self.width - 1) / 2
        uv[..., 1] += (self.height - 1) / 2
        return uv, depth

    def rays(self) -> np.ndarray:
        """World direction (H, W, 3) float32 of the ray through each pixel centre."""
        xs = (np.arange(self.width, dtype=np.float32) - (self.width - 1) / 2) / self.focal
        ys = (np.arange(self.height, dtype=np.float32) - (self.height - 1) / 2) / self.focal
        rot = self.rotation.astype(np.float32)
        return xs[None, :, None] * rot[0] + ys[:, None, None] * rot[1] + rot[2]


def look_at(centre: np.ndarray, target: np.ndarray) -> np.ndarray:
    forward = target - centre
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    return np.stack([right, down, forward])


def sample_camera(rng: np.random.Generator, width: int, height: int, plain: bool) -> Camera:
    """A side view (72 %: the table's length across the image) or an end view (behind a
    player). The table's length covers 30–70 % of a side view's width."""
    hfov = np.radians(rng.uniform(35.0, 65.0))
    focal = (width / 2) / np.tan(hfov / 2)
    if plain or rng.random() < 0.72:
        view = "side"
        az = np.radians(rng.uniform(-30.0, 30.0))
        el = np.radians(rng.uniform(6.0, 30.0))
        span = rng.uniform(0.3, 0.7)
        dist = max(focal * 2 * TABLE_HALF_LENGTH * np.cos(az) / (span * width), 2.5)
    else:
        view = "end"
        az = np.radians(rng.choice([-90.0, 90.0]) + rng.uniform(-15.0, 15.0))
        el = np.radians(rng.uniform(12.0, 30.0))
        dist = rng.uniform(6.5, 9.0)
    direction = np.array([np.sin(az) * np.cos(el), -np.cos(az) * np.cos(el), np.sin(el)])
    target = np.array([rng.uniform(-0.3, 0.3), rng.uniform(-0.2, 0.2), rng.uniform(0.05, 0.45)])
    centre = target + dist * direction
    return Camera(look_at(centre, target), centre, float(focal), width, height, view)


@dataclass(frozen=True)
class Backdrop:
    """``image`` (H, W, 3) uint8 BGR; ``table_mask`` (H, W) float32 in [0, 1]: table top and
    body, which hide a ball that is below the table's surface and behind it."""

    image: np.ndarray
    table_mask: np.ndarray
    table_colour: str


def _fixed(uv: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(uv) * ONE).astype(np.int32)


def _fill(img: np.ndarray, cam: Camera, quad: np.ndarray, colour: tuple[float, ...]) -> bool:
    uv, depth = cam.project(quad)
    if np.any(depth < 0.1):
        return False
    cv2.fillPoly(img, [_fixed(uv)], colour, cv2.LINE_AA, SHIFT)
    return True


def _smooth_noise(rng: np.random.Generator, h: int, w: int, cells: int) -> np.ndarray:
    """Low-frequency noise (h, w) float32 in about [-1, 1]."""
    small = rng.standard_normal((max(2, cells * h // w), cells)).astype(np.float32)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def paint_backdrop(rng: np.random.Generator, cam: Camera, plain: bool) -> Backdrop:
    h, w = cam.height, cam.width
    if plain:
        image: np.ndarray = np.full((h, w, 3), 40, np.uint8)
        return Backdrop(image, np.zeros((h, w), np.float32), "none")
    # OpenCV anti-aliases only on 8-bit images: draw clutter and table on uint8.
    image = np.clip(_paint_room(rng, cam), 0, 255).astype(np.uint8)
    _paint_clutter(rng, image)
    table_colour = str(rng.choice(list(TABLE_COLOURS)))
    mask = np.zeros((h, w), np.uint8)
    _paint_table(rng, cam, image, mask, TABLE_COLOURS[table_colour])
    image = _light(rng, image)
    if rng.random() < 0.3:
        image = cv2.GaussianBlur(image, (0, 0), rng.uniform(0.4, 1.0))
    return Backdrop(image, mask.astype(np.float32) / 255.0, table_colour)


def _paint_room(rng: np.random.Generator, cam: Camera) -> np.ndarray:
    """Ray-cast floor, court barriers and walls; returns float32 BGR (H, W, 3). Cast at half
    resolution and upscaled (0.3 s → 0.08 s at 1280×720; the room is background: soft is
    fine)."""
    half = replace(cam, focal=cam.focal / 2, width=cam.width // 2, height=cam.height // 2)
    img = _cast_room(rng, half)
    return cv2.resize(img, (cam.width, cam.height), interpolation=cv2.INTER_LINEAR)


def _cast_room(rng: np.random.Generator, cam: Camera) -> np.ndarray:
    h, w = cam.height, cam.width
    rays = cam.rays()
    c = cam.centre.astype(np.float32)
    room = np.array(
        [max(abs(c[0]) + 1.5, rng.uniform(6, 10)), max(abs(c[1]) + 1.5, rng.uniform(5, 8))]
    )
    t_wall, wall_u, wall_z = _room_hit(rays, c, room)
    dz = rays[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        t_floor = np.where(dz < -1e-6, (FLOOR_Z - c[2]) / dz, np.inf)
    barrier = np.array([rng.uniform(COURT[0], 6.0), rng.uniform(COURT[1], 4.0)])
    t_bar, _, bar_z = _room_hit(rays, c, barrier)
    bar_h = rng.uniform(0.5, 0.9)
    is_bar = (t_bar < t_floor) & (bar_z < FLOOR_Z + bar_h) & (rng.random() < 0.7)
    is_floor = (t_floor < t_wall) & ~is_bar

    img = np.empty((h, w, 3), np.float32)
    wall_base = rng.uniform(30, 170, 3).astype(np.float32)
    tone = 1.0 + 0.15 * _smooth_noise(rng, h, w, 4)[..., None]
    img[:] = wall_base * tone
    dado = wall_z < FLOOR_Z + rng.uniform(0.8, 1.6)
    img[dado] *= rng.uniform(0.5, 0.9)
    for _ in range(rng.integers(2, 10)):  # banners, windows, doors on the walls
        u0, z0 = rng.uniform(-8, 8), rng.uniform(FLOOR_Z, 3.0)
        sel = (wall_u > u0) & (wall_u < u0 + rng.uniform(0.5, 4)) & (wall_z > z0)
        sel &= wall_z < z0 + rng.uniform(0.3, 1.5)
        img[sel] = rng.uniform(0, 255, 3) if rng.random() < 0.7 else rng.uniform(200, 255)

    floor_col = np.array(FLOOR_COLOURS[rng.integers(len(FLOOR_COLOURS))], np.float32)
    floor_col *= rng.uniform(0.7, 1.2)
    fx = c[0] + t_floor * rays[..., 0]
    planks = rng.uniform(0.9, 1.1, 64).astype(np.float32)
    pattern = planks[(np.nan_to_num(fx, posinf=0, neginf=0) / 0.12).astype(np.int64) % 64]
    img[is_floor] = floor_col * pattern[is_floor][:, None]
    bar_col = np.array(
        rng.choice([(70, 30, 10), (20, 20, 20), (30, 60, 20), (20, 20, 90)]), np.float32
    )
    img[is_bar] = bar_col * rng.uniform(0.7, 1.3)
    stripe = is_bar & (bar_z > FLOOR_Z + bar_h * rng.uniform(0.3, 0.6))
    stripe &= bar_z < FLOOR_Z + bar_h * 0.7
    img[stripe] = rng.uniform(120, 255, 3)
    img += rng.uniform(2.0, 10.0) * _smooth_noise(rng, h, w, int(rng.integers(8, 60)))[..., None]
    return img


def _room_hit(rays: np.ndarray, c: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, ...]:
    """Exit distance of each ray from the vertical box |x| < half[0], |y| < half[1]; the
    horizontal coordinate along the wall hit and the hit's height."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tx = np.where(
            rays[..., 0] > 0, (half[0] - c[0]) / rays[..., 0], (-half[0] - c[0]) / rays[..., 0]
        )
        ty = np.where(
            rays[..., 1] > 0, (half[1] - c[1]) / rays[..., 1], (-half[1] - c[1]) / rays[..., 1]
        )
    tx = np.where(np.isfinite(tx) & (tx > 0), tx, np.inf)
    ty = np.where(np.isfinite(ty) & (ty > 0), ty, np.inf)
    t = np.minimum(tx, ty)
    tt = np.where(np.isfinite(t), t, 0)
    hx, hy = c[0] + tt * rays[..., 0], c[1] + tt * rays[..., 1]
    inside = (np.abs(hx) <= half[0] + 1e-3) & (np.abs(hy) <= half[1] + 1e-3)
    t = np.where(inside, t, np.inf)
    return t, np.where(tx < ty, hy, hx), c[2] + tt * rays[..., 2]


def _paint_clutter(rng: np.random.Generator, img: np.ndarray) -> None:
    """Random shapes: signs, bags, chairs, lights; a few static white dots (balls lying about)."""
    h, w = img.shape[:2]
    for _ in range(rng.integers(3, 25)):
        col = tuple(float(v) for v in rng.uniform(0, 255, 3))
        x, y = rng.uniform(0, w), rng.uniform(0, h)
        size = rng.uniform(0.01, 0.12) * w
        kind = rng.integers(3)
        if kind == 0:
            cv2.rectangle(
                img, (int(x), int(y)), (int(x + size), int(y + size * rng.uniform(0.2, 2))), col, -1
            )
        elif kind == 1:
            axes = (int(size), int(size * rng.uniform(0.2, 1)))
            cv2.ellipse(
                img, (int(x), int(y)), axes, rng.uniform(0, 180), 0, 360, col, -1, cv2.LINE_AA
            )
        else:
            x2, y2 = x + rng.normal(0, size * 2), y + rng.normal(0, size)
            cv2.line(
                img, (int(x), int(y)), (int(x2), int(y2)), col, int(rng.integers(1, 6)), cv2.LINE_AA
            )
    for _ in range(rng.integers(0, 4)):
        r = rng.uniform(1.5, 6.0)
        centre = (int(rng.uniform(0, w) * ONE), int(rng.uniform(0.5, 1.0) * h * ONE))
        col = (235, 235, 235) if rng.random() < 0.6 else (40, 130, 240)
        cv2.circle(img, centre, int(r * ONE), col, -1, cv2.LINE_AA, SHIFT)


def _box(x0: float, x1: float, y0: float, y1: float, z0: float, z1: float) -> dict[str, np.ndarray]:
    """Faces of an axis-aligned box as (4, 3) quads, keyed by their outward normal's name."""
    return {
        "-x": np.array([[x0, y0, z0], [x0, y1, z0], [x0, y1, z1], [x0, y0, z1]]),
        "+x": np.array([[x1, y0, z0], [x1, y1, z0], [x1, y1, z1], [x1, y0, z1]]),
        "-y": np.array([[x0, y0, z0], [x1, y0, z0], [x1, y0, z1], [x0, y0, z1]]),
        "+y": np.array([[x0, y1, z0], [x1, y1, z0], [x1, y1, z1], [x0, y1, z1]]),
        "top": np.array([[x0, y0, z1], [x1, y0, z1], [x1, y1, z1], [x0, y1, z1]]),
    }


_NORMALS = {"-x": (-1, 0, 0), "+x": (1, 0, 0), "-y": (0, -1, 0), "+y": (0, 1, 0), "top": (0, 0, 1)}


def _faces_seen(cam: Camera, box: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    return [
        (name, quad)
        for name, quad in box.items()
        if np.dot(np.array(_NORMALS[name]), cam.centre - quad.mean(axis=0)) > 0
    ]


def _paint_table(
    rng: np.random.Generator,
    cam: Camera,
    img: np.ndarray,
    mask: np.ndarray,
    colour: tuple[int, ...],
) -> None:
    L, W = TABLE_HALF_LENGTH, TABLE_HALF_WIDTH
    leg_col = tuple(float(v) for v in rng.uniform(15, 60, 3))
    for sx in (-1, 1):
        for sy in (-1, 1):
            x, y = sx * (L - 0.3), sy * (W - 0.15)
            for name, quad in _faces_seen(
                cam, _box(x - 0.03, x + 0.03, y - 0.03, y + 0.03, FLOOR_Z, -0.03)
            ):
                _fill(img, cam, quad, leg_col)
    top = np.array(colour, np.float32) * rng.uniform(0.8, 1.2)
    body = _box(-L, L, -W, W, -0.03, 0.0)
    for name, quad in _faces_seen(cam, body):
        col = top if name == "top" else top * 0.45
        _fill(img, cam, quad, tuple(float(v) for v in col))
        _fill(mask, cam, quad, (255,))
    white = (240.0, 240.0, 240.0)
    e = 0.02
    for x0, x1, y0, y1 in (
        (-L, L, -W, -W + e),
        (-L, L, W - e, W),
        (-L, -L + e, -W, W),
        (L - e, L, -W, W),
        (-L, L, -0.0015, 0.0015),
    ):
        _fill(img, cam, np.array([[x0, y0, 0], [x1, y0, 0], [x1, y1, 0], [x0, y1, 0]]), white)
    for name, quad in _faces_seen(cam, body):
        if name != "top":  # white edge on the sides' upper rim
            rim = quad.copy()
            rim[:2, 2] = -0.012
            _fill(img, cam, rim, white)
    _paint_net(rng, cam, img)


def _paint_net(rng: np.random.Generator, cam: Camera, img: np.ndarray) -> None:
    Y, H = NET_HALF_WIDTH, NET_HEIGHT
    layer = img.copy()
    _fill(layer, cam, np.array([[0, -Y, 0], [0, Y, 0], [0, Y, H], [0, -Y, H]]), (25.0, 25.0, 30.0))
    a = rng.uniform(0.35, 0.6)
    cv2.addWeighted(layer, a, img, 1 - a, 0, dst=img)
    _fill(
        img,
        cam,
        np.array([[0, -Y, H - 0.015], [0, Y, H - 0.015], [0, Y, H], [0, -Y, H]]),
        (235.0, 235.0, 235.0),
    )
    for sy in (-1, 1):
        y = sy * Y
        _fill(
            img,
            cam,
            np.array([[-0.01, y, -0.03], [0.01, y, -0.03], [0.01, y, H], [-0.01, y, H]]),
            (30.0, 30.0, 30.0),
        )


def _light(rng: np.random.Generator, img: np.ndarray) -> np.ndarray:
    """Spotlights and a vignette; returns a new uint8 image."""
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    gain = np.ones((h, w), np.float32)
    for _ in range(rng.integers(0, 4)):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.2, 0.6) * w
        gain += rng.uniform(0.1, 0.4) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
    vignette = ((xx - w / 2) ** 2 + (yy - h / 2) ** 2) / ((w / 2) ** 2 + (h / 2) ** 2)
    gain *= 1.0 - rng.uniform(0.0, 0.4) * vignette
    gain *= rng.uniform(0.7, 1.2)
    return np.clip(img * gain[..., None] + 0.5, 0, 255).astype(np.uint8)
