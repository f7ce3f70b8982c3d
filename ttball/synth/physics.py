"""Rally trajectories of a table-tennis ball in 3D, as piecewise ballistic arcs.

World frame, metres: table surface at z = 0, the table spans x in [-1.37, 1.37] (its length,
the net at x = 0) and y in [-0.7625, 0.7625]; z is up; the floor is at z = -0.76. Player ``side``
+1 stands beyond x = +1.37 and hits towards -x.

The ball flies under a per-arc vertical acceleration (gravity changed by spin: topspin pulls
down harder, backspin floats), bounces on the table and the floor, and is hit back from a
player's side (velocity reversal towards a bounce point on the other half, clearing the net).
Some shots are missed: the ball falls to the floor, is picked up, and a new serve starts after
a pause. Each arc is exact, so a position at any time is one evaluation (no time stepping).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GRAVITY = 9.81
TABLE_HALF_LENGTH = 1.37
TABLE_HALF_WIDTH = 0.7625
NET_HEIGHT = 0.1525
NET_HALF_WIDTH = 0.9125
FLOOR_Z = -0.76
BALL_RADIUS_M = 0.02


@dataclass(frozen=True)
class Hit:
    """A player's stroke: who hit (side ±1), when and where (metres)."""

    t: float
    side: int
    position: tuple[float, float, float]


@dataclass
class Trajectory:
    """Piecewise ballistic arcs. ``arc_t0`` (A,) start times; ``arc_p0``, ``arc_v0`` (A, 3);
    ``arc_g`` (A,) downward acceleration. ``present`` holds (start, end) intervals during which
    the ball is in play (between a serve and its pick-up after a miss)."""

    arc_t0: np.ndarray
    arc_p0: np.ndarray
    arc_v0: np.ndarray
    arc_g: np.ndarray
    present: list[tuple[float, float]]
    hits: list[Hit] = field(default_factory=list)

    def position(self, t: np.ndarray) -> np.ndarray:
        """Ball centre (..., 3) at times ``t`` (...) in seconds."""
        t = np.asarray(t, dtype=np.float64)
        idx = np.clip(np.searchsorted(self.arc_t0, t, side="right") - 1, 0, len(self.arc_t0) - 1)
        dt = (t - self.arc_t0[idx])[..., None]
        pos = self.arc_p0[idx] + self.arc_v0[idx] * dt
        pos[..., 2] -= 0.5 * self.arc_g[idx] * dt[..., 0] ** 2
        return pos

    def is_present(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        out = np.zeros(t.shape, dtype=bool)
        for start, end in self.present:
            out |= (t >= start) & (t < end)
        return out


@dataclass(frozen=True)
class RallyStyle:
    """How a clip's rallies are played: horizontal shot speeds (m/s), how often shots are
    missed or lobbed, and how far back the players stand (m behind the table's end)."""

    speed: tuple[float, float] = (4.0, 14.0)
    miss_prob: float = 0.12
    lob_prob: float = 0.1
    player_distance: tuple[float, float] = (0.2, 2.0)

    @classmethod
    def sample(cls, rng: np.random.Generator) -> RallyStyle:
        lo = rng.uniform(3.0, 8.0)
        return cls(
            speed=(lo, lo + rng.uniform(3.0, 10.0)),
            miss_prob=rng.uniform(0.03, 0.15),
            lob_prob=rng.uniform(0.0, 0.2),
            player_distance=(0.2, rng.uniform(0.6, 1.5)),
        )


class _Builder:
    """Appends arcs while simulating; times are absolute seconds."""

    def __init__(self, rng: np.random.Generator, style: RallyStyle) -> None:
        self.rng = rng
        self.style = style
        self.t0: list[float] = []
        self.p0: list[np.ndarray] = []
        self.v0: list[np.ndarray] = []
        self.g: list[float] = []
        self.present: list[tuple[float, float]] = []
        self.hits: list[Hit] = []

    def arc(self, t: float, p: np.ndarray, v: np.ndarray, g: float) -> None:
        self.t0.append(t)
        self.p0.append(np.asarray(p, dtype=np.float64))
        self.v0.append(np.asarray(v, dtype=np.float64))
        self.g.append(g)

    def spin_g(self) -> float:
        return GRAVITY * self.rng.uniform(0.75, 1.45)

    def build(self) -> Trajectory:
        if any(b < a for a, b in zip(self.t0, self.t0[1:])):
            raise RuntimeError("rally arcs out of time order")  # a bug here, not bad input
        return Trajectory(
            arc_t0=np.array(self.t0),
            arc_p0=np.array(self.p0),
            arc_v0=np.array(self.v0),
            arc_g=np.array(self.g),
            present=self.present,
            hits=self.hits,
        )


def _state(p: np.ndarray, v: np.ndarray, g: float, dt: float) -> tuple[np.ndarray, np.ndarray]:
    p1 = p + v * dt
    p1[2] -= 0.5 * g * dt * dt
    v1 = v.copy()
    v1[2] -= g * dt
    return p1, v1


def _time_to_height(p: np.ndarray, v: np.ndarray, g: float, z: float) -> float | None:
    """First positive time at which the arc descends through height ``z``."""
    # p_z + v_z t - g t²/2 = z  →  (g/2) t² - v_z t + (z - p_z) = 0
    disc = v[2] ** 2 - 2.0 * g * (z - p[2])
    if disc < 0:
        return None
    t = (v[2] + np.sqrt(disc)) / g
    return float(t) if t > 1e-6 else None


def _aim(p: np.ndarray, target: np.ndarray, flight: float, g: float) -> np.ndarray:
    """Velocity that takes the ball from ``p`` to ``target`` in ``flight`` seconds."""
    v = (target - p) / flight
    v[2] += 0.5 * g * flight
    return v


def _clears_net(p: np.ndarray, v: np.ndarray, g: float) -> bool:
    if abs(v[0]) < 1e-9 or np.sign(-p[0]) != np.sign(v[0]):
        return True
    t = -p[0] / v[0]
    return p[2] + v[2] * t - 0.5 * g * t * t > NET_HEIGHT + 0.03


def _shot(
    b: _Builder, t: float, p: np.ndarray, towards: int, lob: bool
) -> tuple[float, np.ndarray]:
    """Aim a shot from ``p`` at a bounce on the half of side ``towards`` and append its arc;
    returns the arc's downward acceleration and velocity."""
    rng = b.rng
    target = np.array([towards * rng.uniform(0.25, 1.25), rng.uniform(-0.65, 0.65), 0.0])
    g = b.spin_g()
    dist = float(np.hypot(*(target - p)[:2]))
    flight = rng.uniform(0.9, 1.7) if lob else dist / rng.uniform(*b.style.speed)
    v = _aim(p, target, flight, g)
    for _ in range(30):
        if _clears_net(p, v, g):
            break
        flight *= 1.1
        v = _aim(p, target, flight, g)
    b.arc(t, p, v, g)
    return g, v


def _on_table(p: np.ndarray) -> bool:
    return abs(p[0]) <= TABLE_HALF_LENGTH and abs(p[1]) <= TABLE_HALF_WIDTH


def _fall(b: _Builder, t: float, p: np.ndarray, v: np.ndarray, g: float, until: float) -> None:
    """Let an un-hit ball bounce on the table/floor until ``until`` (arcs appended)."""
    rng = b.rng
    while t < until:
        on_table = p[2] >= -1e-6
        dt = _time_to_height(p, v, g, 0.0) if on_table else None
        if dt is not None:
            p1, _ = _state(p, v, g, dt)
            if not _on_table(p1):
                dt = None
        surface = 0.0 if dt is not None else FLOOR_Z
        if dt is None:
            dt = _time_to_height(p, v, g, FLOOR_Z)
        if dt is None or dt < 1e-3 or t + dt >= until:
            return
        p, v = _state(p, v, g, dt)
        p[2] = surface
        v[2] = -v[2] * rng.uniform(0.6, 0.85)
        v[:2] *= rng.uniform(0.7, 0.95)
        t += dt
        g = GRAVITY
        if v[2] < 0.3 and surface == FLOOR_Z:  # rolls away on the floor
            v[2] = 0.0
            g = 0.0
            b.arc(t, p, v * 0.9, g)
            return
        b.arc(t, p, v, g)


def _serve(b: _Builder, t: float, side: int) -> tuple[float, np.ndarray, np.ndarray, float]:
    """Toss and serve from ``side``: toss arc, own-half bounce, then a shot at the other half.
    Returns the state of the last arc (start time, position, velocity, g)."""
    rng = b.rng
    hand = np.array(
        [
            side * (TABLE_HALF_LENGTH + rng.uniform(0.05, 0.4)),
            rng.uniform(-0.6, 0.6),
            rng.uniform(-0.05, 0.2),
        ]
    )
    toss = np.array([0.0, 0.0, rng.uniform(1.5, 3.0)])
    b.arc(t, hand, toss, GRAVITY)
    dt = _time_to_height(hand, toss, GRAVITY, hand[2] + 0.05) or 0.3
    t += dt
    p, _ = _state(hand, toss, GRAVITY, dt)
    b.hits.append(Hit(t, side, tuple(p)))
    own = np.array([side * rng.uniform(0.3, 1.0), rng.uniform(-0.6, 0.6), 0.0])
    flight = rng.uniform(0.18, 0.35)
    g = b.spin_g()
    b.arc(t, p, _aim(p, own, flight, g), g)
    t += flight
    g, v = _shot(b, t, own, -side, lob=False)
    return t, own, v, g


def simulate_rally(
    rng: np.random.Generator, start: float, end: float, style: RallyStyle | None = None
) -> Trajectory:
    """Rallies from ``start`` to ``end`` seconds: serve, exchanges, misses, pauses."""
    style = style or RallyStyle.sample(rng)
    b = _Builder(rng, style)
    t = start
    side = int(rng.choice([-1, 1]))
    while t < end:
        serve_t = t
        t, p, v, g = _serve(b, t, side)
        gone = _exchange(b, t, p, v, g, -side, end)
        b.present.append((serve_t, gone))
        t = gone + rng.uniform(0.3, 1.2)
        side = int(rng.choice([-1, 1]))
    if not b.t0:
        b.arc(start, np.zeros(3), np.zeros(3), 0.0)
    return b.build()


def _exchange(
    b: _Builder, t: float, p: np.ndarray, v: np.ndarray, g: float, receiver: int, end: float
) -> float:
    """Play shots until one is missed (or ``end`` passes), let the ball fall about until it is
    picked up, and return that time. No arc starts after it, so arc start times stay sorted
    when the next serve appends its own."""
    rng = b.rng
    while True:
        # Arc from p (a hit or a serve's own-half bounce) to the bounce on the receiver's half.
        dt = _time_to_height(p, v, g, 0.0)
        if dt is None:
            return t + 0.5
        p, v = _state(p, v, g, dt)
        p[2] = 0.0
        t += dt
        v[2] = -v[2] * rng.uniform(0.8, 0.93)
        v[0] *= rng.uniform(0.75, 1.1)
        v[1] *= rng.uniform(0.8, 1.0)
        g = b.spin_g()
        b.arc(t, p, v, g)
        hit = _hit_time(b, p, v, g, receiver)
        if hit is None or rng.random() < b.style.miss_prob or t > end:
            gone = t + rng.uniform(0.9, 1.5)
            _fall(b, t, p, v, g, gone)
            return gone
        p, v = _state(p, v, g, hit)
        t += hit
        b.hits.append(Hit(t, receiver, tuple(p)))
        g, v = _shot(b, t, p, -receiver, lob=rng.random() < b.style.lob_prob)
        receiver = -receiver


def _hit_time(b: _Builder, p: np.ndarray, v: np.ndarray, g: float, side: int) -> float | None:
    """When the player on ``side`` meets the bounced ball: as it crosses their hitting plane,
    or else (a ball too high or too low there) once it comes down to a playable height behind
    the table's end, or (a short ball) at its top, reaching in over the table."""
    if np.sign(v[0]) != side or abs(v[0]) < 0.3:
        return None
    plane = side * (TABLE_HALF_LENGTH + b.rng.uniform(*b.style.player_distance))
    dt = (plane - p[0]) / v[0]
    z = p[2] + v[2] * dt - 0.5 * g * dt * dt
    if -0.3 <= z <= 1.6:
        return float(dt)
    dt2 = _time_to_height(p, v, g, b.rng.uniform(0.0, 0.8))
    if dt2 is not None and abs(p[0] + v[0] * dt2) >= TABLE_HALF_LENGTH + 0.15:
        return dt2
    apex = v[2] / g if g > 0 else 0.0  # a short ball: reach in over the table at its top
    if apex > 0 and p[2] + 0.5 * v[2] * apex >= 0.08 and abs(p[0] + v[0] * apex) >= 0.7:
        return float(apex)
    return None
