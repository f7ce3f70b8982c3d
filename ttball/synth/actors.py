"""Moving things other than the ball: the two players (3D stick figures that move to the ball
and swing their racket through it at each hit) and image-space distractors (people walking
behind, blobs drifting about; some white-ish, as hard negatives for the detector).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ttball.synth.physics import FLOOR_Z, TABLE_HALF_LENGTH, Trajectory
from ttball.synth.scene import ONE, SHIFT, Camera

Colour = tuple[float, float, float]
SWING_S = 0.25  # half-duration of a stroke, seconds

# Limbs as (from, to, width in metres); points are indices into Poses.points' second axis.
_HEAD, _NECK, _HIP_L, _HIP_R, _KNEE_L, _KNEE_R, _FOOT_L, _FOOT_R = range(8)
_SH_R, _EL_R, _HAND_R, _SH_F, _EL_F, _HAND_F, _RACKET = range(8, 15)
_LEGS = (
    (_HIP_L, _KNEE_L, 0.14),
    (_KNEE_L, _FOOT_L, 0.11),
    (_HIP_R, _KNEE_R, 0.14),
    (_KNEE_R, _FOOT_R, 0.11),
)
_FREE_ARM = ((_SH_F, _EL_F, 0.09), (_EL_F, _HAND_F, 0.07))
_RACKET_ARM = ((_SH_R, _EL_R, 0.09), (_EL_R, _HAND_R, 0.07))


def _colour(rng: np.random.Generator, lo: float = 0.0, hi: float = 255.0) -> Colour:
    c = rng.uniform(lo, hi, 3)
    return (float(c[0]), float(c[1]), float(c[2]))


def _scaled(c: Colour, k: float) -> Colour:
    return (c[0] * k, c[1] * k, c[2] * k)


def _white(rng: np.random.Generator) -> Colour:
    v = rng.uniform(190, 250)
    return (v * rng.uniform(0.9, 1.0), v * rng.uniform(0.93, 1.0), v)


@dataclass(frozen=True)
class Player:
    side: int
    hand: int  # the racket is held on this side of the body (world y sign)
    height: float
    shirt: Colour
    shorts: Colour
    skin: Colour
    racket: Colour

    @classmethod
    def sample(cls, rng: np.random.Generator, side: int) -> Player:
        return cls(
            side=side,
            hand=int(rng.choice([-1, 1])),
            height=rng.uniform(0.9, 1.1),
            shirt=_white(rng) if rng.random() < 0.3 else _colour(rng),
            shorts=_colour(rng, 10, 90),
            skin=_scaled((90.0, 130.0, 190.0), rng.uniform(0.4, 1.15)),
            racket=(30.0, 30.0, 200.0) if rng.random() < 0.5 else (25.0, 25.0, 25.0),
        )


@dataclass(frozen=True)
class Poses:
    """A player's skeleton over the clip: ``points`` (F, 15, 3) world metres per frame."""

    player: Player
    points: np.ndarray

    def torso_depth(self, cam: Camera) -> np.ndarray:
        _, depth = cam.project(self.points[:, [_NECK, _HIP_L, _HIP_R]].mean(axis=1))
        return depth


def _body_xy(
    player: Player, traj: Trajectory, times: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Body position (F, 2): moves between the spots from which it plays its hits."""
    s, home_x = player.side, player.side * (TABLE_HALF_LENGTH + rng.uniform(0.4, 1.2))
    hits = [h for h in traj.hits if h.side == s]
    if hits:
        ht = np.array([h.t for h in hits])
        hx = np.array([h.position[0] + s * 0.3 for h in hits])
        hy = np.array([h.position[1] - player.hand * 0.45 for h in hits])
        x, y = np.interp(times, ht, hx), np.interp(times, ht, hy)
    else:
        x, y = np.full_like(times, home_x), np.full_like(times, rng.uniform(-0.5, 0.5))
    x = s * np.maximum(s * x, TABLE_HALF_LENGTH + 0.3)
    y = y + 0.05 * np.sin(2 * np.pi * rng.uniform(0.5, 1.5) * times + rng.uniform(0, 6.3))
    return np.stack([x, y], axis=1)


def _racket_centre(
    player: Player, traj: Trajectory, times: np.ndarray, body: np.ndarray
) -> np.ndarray:
    """Racket (F, 3): at rest in front of the body, swung through the ball at each hit."""
    s, hand, hgt = player.side, player.hand, player.height
    rest = np.stack(
        [body[:, 0] - s * 0.35, body[:, 1] + hand * 0.3, np.full(len(times), FLOOR_Z + 1.0 * hgt)],
        1,
    )
    out = rest.copy()
    swing_dir = np.array([-s * 3.0, 0.0, 1.5])
    for h in traj.hits:
        if h.side != s:
            continue
        dt = times - h.t
        near = np.abs(dt) < SWING_S
        if not near.any():
            continue
        w = np.cos(0.5 * np.pi * dt[near] / SWING_S)[:, None] ** 2
        swing = np.array(h.position) + np.array([s * 0.05, 0, 0]) + swing_dir * dt[near][:, None]
        out[near] = rest[near] * (1 - w) + swing * w
    return out


def player_poses(
    player: Player, traj: Trajectory, times: np.ndarray, rng: np.random.Generator
) -> Poses:
    s, hand, hgt = player.side, player.hand, player.height
    body = _body_xy(player, traj, times, rng)
    n = len(times)
    pts = np.zeros((n, 15, 3))
    base = np.stack([body[:, 0], body[:, 1], np.full(n, FLOOR_Z)], 1)

    def at(dx: float, dy: float, dz: float) -> np.ndarray:
        return base + np.array([dx, dy, dz * hgt])

    pts[:, _HEAD] = at(0, 0, 1.6)
    pts[:, _NECK] = at(0, 0, 1.42)
    pts[:, _HIP_L], pts[:, _HIP_R] = at(0, -0.13, 0.9), at(0, 0.13, 0.9)
    pts[:, _KNEE_L], pts[:, _KNEE_R] = at(-s * 0.08, -0.2, 0.48), at(-s * 0.08, 0.2, 0.48)
    pts[:, _FOOT_L], pts[:, _FOOT_R] = at(0, -0.25, 0.03), at(0, 0.25, 0.03)
    pts[:, _SH_R], pts[:, _SH_F] = at(0, hand * 0.2, 1.38), at(0, -hand * 0.2, 1.38)
    pts[:, _EL_F], pts[:, _HAND_F] = (
        at(-s * 0.15, -hand * 0.3, 1.1),
        at(-s * 0.35, -hand * 0.2, 1.05),
    )
    racket = _racket_centre(player, traj, times, body)
    reach = racket - pts[:, _SH_R]
    reach /= np.maximum(np.linalg.norm(reach, axis=1, keepdims=True), 1e-6)
    pts[:, _HAND_R] = racket - 0.15 * reach
    pts[:, _EL_R] = 0.5 * (pts[:, _SH_R] + pts[:, _HAND_R]) + np.array([0, 0, -0.1])
    pts[:, _RACKET] = racket
    return Poses(player, pts)


def draw_player(
    img: np.ndarray,
    cam: Camera,
    poses: Poses,
    i: int,
    offset: tuple[float, float] = (0.0, 0.0),
    fill: Colour | None = None,
) -> None:
    """Draw frame ``i``'s pose; ``offset`` is subtracted from pixel positions (to draw into a
    patch); ``fill`` replaces every colour (to draw an occlusion mask)."""
    pts = poses.points[i]
    uv, depth = cam.project(pts)
    if np.any(depth < 0.3):
        return
    uv = uv - np.asarray(offset)
    px = np.round(uv * ONE).astype(np.int32)
    scale = cam.focal / depth
    p = poses.player

    def col(c: Colour) -> Colour:
        return fill if fill is not None else c

    def limb(a: int, b: int, width: float, c: Colour) -> None:
        th = max(1, round(width * 0.5 * (scale[a] + scale[b])))
        cv2.line(img, tuple(px[a]), tuple(px[b]), col(c), th, cv2.LINE_AA, SHIFT)

    for a, b, wd in _LEGS:
        limb(a, b, wd, p.shorts if a in (_HIP_L, _HIP_R) else p.skin)
    half = 0.2 * scale[_NECK] * ONE
    torso = np.array(
        [px[_NECK] + (-half, 0), px[_NECK] + (half, 0), px[_HIP_R], px[_HIP_L]], np.int32
    )
    cv2.fillConvexPoly(img, cv2.convexHull(torso), col(p.shirt), cv2.LINE_AA, SHIFT)
    for a, b, wd in _FREE_ARM:
        limb(a, b, wd, p.skin)
    cv2.circle(
        img, tuple(px[_HEAD]), int(0.11 * scale[_HEAD] * ONE), col(p.skin), -1, cv2.LINE_AA, SHIFT
    )
    for a, b, wd in _RACKET_ARM:
        limb(a, b, wd, p.skin)
    cv2.circle(
        img,
        tuple(px[_RACKET]),
        int(0.08 * scale[_RACKET] * ONE),
        col(p.racket),
        -1,
        cv2.LINE_AA,
        SHIFT,
    )


@dataclass(frozen=True)
class Distractor:
    """An image-space shape moving behind the play: a walking figure or a drifting blob.
    Position at time t: ``start + velocity·t + wobble·sin(ω t + φ)``, pixels."""

    kind: str
    start: tuple[float, float]
    velocity: tuple[float, float]
    wobble: tuple[float, float]
    omega: float
    phase: float
    size: float
    aspect: float
    colour: Colour

    @classmethod
    def sample(cls, rng: np.random.Generator, width: int, height: int) -> Distractor:
        walker = rng.random() < 0.5
        speed = rng.uniform(20, 150) if walker else rng.uniform(10, 400)
        angle = rng.uniform(0, 2 * np.pi) if not walker else rng.choice([0.0, np.pi])
        return cls(
            kind="walker" if walker else "blob",
            start=(rng.uniform(0, width), rng.uniform(0.1, 0.6 if walker else 1.0) * height),
            velocity=(speed * np.cos(angle), 0.0 if walker else speed * np.sin(angle)),
            wobble=(rng.uniform(0, 30), rng.uniform(0, 30)),
            omega=rng.uniform(0.5, 8.0),
            phase=rng.uniform(0, 2 * np.pi),
            size=rng.uniform(0.12, 0.45) * height
            if walker
            else rng.uniform(14, 0.15 * height + 14),
            aspect=rng.uniform(0.25, 0.5) if walker else rng.uniform(0.5, 1.0),
            colour=_white(rng) if rng.random() < 0.35 else _colour(rng),
        )

    def draw(self, img: np.ndarray, t: float) -> None:
        h, w = img.shape[:2]
        x = (
            self.start[0]
            + self.velocity[0] * t
            + self.wobble[0] * np.sin(self.omega * t + self.phase)
        )
        y = (
            self.start[1]
            + self.velocity[1] * t
            + self.wobble[1] * np.cos(self.omega * t + self.phase)
        )
        x, y = (
            x % (w + 2 * self.size) - self.size,
            y % (h + 2 * self.size) - self.size,
        )  # wrap around
        if self.kind == "blob":
            axes = (int(self.size / 2 * ONE), int(self.size / 2 * self.aspect * ONE))
            ang = np.degrees(self.omega * t) % 180
            cv2.ellipse(
                img,
                (int(x * ONE), int(y * ONE)),
                axes,
                ang,
                0,
                360,
                self.colour,
                -1,
                cv2.LINE_AA,
                SHIFT,
            )
            return
        s = self.size
        body = (int(x * ONE), int((y + 0.35 * s) * ONE))
        cv2.ellipse(
            img,
            body,
            (int(s * self.aspect / 2 * ONE), int(s * 0.25 * ONE)),
            0,
            0,
            360,
            self.colour,
            -1,
            cv2.LINE_AA,
            SHIFT,
        )
        cv2.circle(
            img,
            (int(x * ONE), int((y + 0.03 * s) * ONE)),
            int(0.08 * s * ONE),
            (80.0, 110.0, 160.0),
            -1,
            cv2.LINE_AA,
            SHIFT,
        )
        stride = 0.15 * s * np.sin(self.omega * 2 * t)
        for sign in (-1, 1):
            foot = (int((x + sign * stride) * ONE), int((y + s) * ONE))
            cv2.line(
                img,
                (int(x * ONE), int((y + 0.55 * s) * ONE)),
                foot,
                (40.0, 40.0, 40.0),
                max(1, int(0.07 * s)),
                cv2.LINE_AA,
                SHIFT,
            )
