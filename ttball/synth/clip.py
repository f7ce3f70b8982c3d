"""One synthetic clip: a seeded plan (camera, rally, ball, actors, ground truth), then frames
rendered on demand, in memory or into ``clip_XXXX.mp4`` + ``clip_XXXX.csv``.

Ground truth (per :mod:`ttball.results`): x, y is the blur centre in original-frame pixels
(pixel centres at integer coordinates), ``blur_angle_deg`` the streak's direction in (-90, 90],
``blur_length_px`` half the streak's extent. A frame is visible when the ball is in play, the
blur centre lies inside the frame, and at most half of the streak's coverage is hidden (by a
player in front of it, or by the table when the ball is below and behind it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from ttball.errors import UserError
from ttball.results import FrameResult, write_track_csv
from ttball.synth.actors import Distractor, Player, Poses, draw_player, player_poses
from ttball.synth.physics import (
    BALL_RADIUS_M,
    FLOOR_Z,
    TABLE_HALF_LENGTH,
    TABLE_HALF_WIDTH,
    Trajectory,
    simulate_rally,
)
from ttball.synth.render import (
    CameraEffects,
    Sprite,
    StreakGeometry,
    composite,
    defocus,
    falloff_weights,
    render_streak,
    sprite_window,
    streak_geometry,
)
from ttball.synth.scene import COURT, SIZES, Backdrop, Camera, paint_backdrop, sample_camera

FPS_CHOICES = (25.0, 30.0, 50.0, 60.0, 100.0, 120.0)
# Ball positions per exposure for the ground truth; its 32 intervals split into 4, 8 or 16
# segments for rendering.
PATH_SAMPLES = 33
FOURCC = "mp4v"  # the MP4 codec this OpenCV build can write (avc1/H264 encoders are absent)


@dataclass(frozen=True)
class ClipConfig:
    """``size`` (width, height) or None for a random one of ``SIZES``; ``fps`` or None for a
    random one of ``FPS_CHOICES``; ``plain``: flat grey background, white ball, no players,
    distractors, lighting changes, noise or JPEG (for tests and debugging)."""

    size: tuple[int, int] | None = (1280, 720)
    fps: float | None = None
    frames: int = 150
    plain: bool = False


@dataclass(frozen=True)
class Ball:
    colour: np.ndarray  # (3,) BGR; above 255 for a ball brighter than the sensor's white
    name: str
    radius_m: float  # world radius that gives the sampled pixel radius at the table's centre
    radius_px: float
    shutter: float  # exposure as a fraction of the frame interval
    falloff: float
    shading: float
    defocus: float

    @classmethod
    def sample(cls, rng: np.random.Generator, cam: Camera, plain: bool) -> Ball:
        _, depth = cam.project(np.zeros(3))
        natural = BALL_RADIUS_M * cam.focal / float(depth)
        radius_px = float(np.clip(natural * rng.uniform(0.6, 1.3), 1.0, 6.0))
        if plain:
            colour, name, gain = np.array([235.0, 235.0, 235.0]), "white", 1.0
        elif rng.random() < 0.7:
            colour, name, gain = rng.uniform(225, 255, 3), "white", rng.uniform(1.0, 2.5)
        else:
            colour = np.array([rng.uniform(10, 70), rng.uniform(110, 170), 255.0])
            name, gain = "orange", rng.uniform(1.0, 2.0)
        return cls(
            colour=colour * gain,
            name=name,
            radius_m=BALL_RADIUS_M * radius_px / natural,
            radius_px=radius_px,
            shutter=float(rng.uniform(0.3, 1.0)),
            falloff=float(rng.uniform(0.0, 0.5)),
            shading=0.0 if plain else float(rng.uniform(0.0, 0.4)),
            defocus=0.0 if plain or rng.random() < 0.5 else float(rng.uniform(0.3, 0.8)),
        )


@dataclass
class ClipPlan:
    """Everything about a clip except its pixels; ``frames()`` renders them. ``trajectory``
    is the ball's 3D path (times in seconds from frame 0), with the players' hits."""

    settings: dict[str, Any]
    rows: list[FrameResult]
    trajectory: Trajectory
    camera: Camera
    backdrop: Backdrop
    ball: Ball
    effects: CameraEffects
    sprites: list[Sprite | None]
    front: list[list[Poses]]
    back: list[list[Poses]]
    distractors: list[Distractor] = field(default_factory=list)
    frame_seed: int = 0

    def frames(
        self,
        wanted: Sequence[bool] | np.ndarray | None = None,
        regions: Sequence[tuple[int, int, int, int]] | None = None,
    ) -> Iterator[np.ndarray]:
        """Frames (H, W, 3) uint8 BGR, in order. With ``wanted`` (one flag per frame), only the
        wanted ones, each the same as without it: a skipped frame still makes its random draws.
        With ``regions`` (one (x0, y0, x1, y1) per frame), only the pixels inside each region
        are sure to be the same: the camera effects (noise, JPEG) are computed around the region
        only. Training renders only the frames, and the parts of them, its windows use."""
        rng = np.random.default_rng(self.frame_seed)
        cam = self.camera
        for i, row in enumerate(self.rows):
            draws = self.effects.draw(rng)
            if wanted is not None and not wanted[i]:
                continue
            img = self.backdrop.image.copy()
            for d in self.distractors:
                d.draw(img, row.time_s)
            for p in self.back[i]:
                draw_player(img, cam, p, i)
            sprite = self.sprites[i]
            if sprite is not None:
                composite(img, sprite, self.ball.colour)
            for p in self.front[i]:
                draw_player(img, cam, p, i)
            yield self.effects.apply(img, i, draws, None if regions is None else regions[i])


def clip_seed(seed: int, index: int) -> int:
    """The seed of clip ``index`` of a data set generated with ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def generate_clip(
    seed: int, config: ClipConfig = ClipConfig()
) -> tuple[Iterator[np.ndarray], list[FrameResult]]:
    """Frames (an iterator of (H, W, 3) uint8 BGR arrays, rendered lazily) and their ground
    truth (one ``FrameResult`` per frame, score 1 when visible). Same seed, same clip."""
    plan = plan_clip(seed, config)
    return plan.frames(), plan.rows


def plan_clip(seed: int, config: ClipConfig = ClipConfig()) -> ClipPlan:
    """Sample a clip from ``seed``: camera, rally, ball, actors, backdrop, camera effects; the
    ball's image per frame (small patches) and the ground truth. Pixels come from ``frames()``."""
    if config.frames < 1:
        raise UserError(f"a clip needs at least 1 frame, got {config.frames}")
    if config.fps is not None and not 1 <= config.fps <= 1000:  # (0 was "random", nan failed)
        raise UserError(f"a clip's fps must be between 1 and 1000 (or None: random), got "
                        f"{config.fps}")
    if config.size is not None and not (
            len(config.size) == 2 and all(isinstance(n, int) and n >= 64 and n % 2 == 0
                                          for n in config.size)):
        raise UserError(f"a clip's size (width, height) must be even integers of at least 64, "
                        f"got {config.size}")
    rng = np.random.default_rng(seed)
    width, height = config.size or SIZES[int(rng.integers(len(SIZES)))]
    fps = float(config.fps or rng.choice(FPS_CHOICES))
    times = np.arange(config.frames) / fps
    cam = sample_camera(rng, width, height, config.plain)
    traj = simulate_rally(rng, -rng.uniform(0.2, 3.0), float(times[-1]) + 0.5)
    ball = Ball.sample(rng, cam, config.plain)

    tau = np.linspace(-0.5, 0.5, PATH_SAMPLES)
    sub_t = times[:, None] + tau[None, :] * ball.shutter / fps
    pos = traj.position(sub_t)
    uv, depth = cam.project(pos)
    radius = ball.radius_m * cam.focal / np.maximum(depth, 1e-6)
    geom = streak_geometry(uv, radius)
    # In play for the whole exposure: a serve's first arc does not continue the last rally's.
    present = traj.is_present(sub_t).all(axis=1) & (depth.min(axis=1) > 0.3)
    present &= _in_court(pos[:, PATH_SAMPLES // 2])

    players: list[Poses] = []
    distractors: list[Distractor] = []
    if not config.plain:
        players = [player_poses(Player.sample(rng, s), traj, times, rng) for s in (-1, 1)]
        distractors = [
            Distractor.sample(rng, width, height) for _ in range(int(rng.integers(0, 5)))
        ]
    backdrop = paint_backdrop(rng, cam, config.plain)
    effects = CameraEffects.sample(rng, times, width, height, config.plain)

    mid = PATH_SAMPLES // 2
    torso = [p.torso_depth(cam) for p in players]
    front = [[p for p, d in zip(players, torso) if d[i] < depth[i, mid]] for i in range(len(times))]
    back = [[p for p, d in zip(players, torso) if d[i] >= depth[i, mid]] for i in range(len(times))]
    sprites: list[Sprite | None] = []
    rows: list[FrameResult] = []
    for i, t in enumerate(times):
        sprite, seen = None, False
        if present[i]:
            sprite = _ball_sprite(uv[i], radius[i], ball)
            if sprite is not None:
                sprite, seen = _occlude(sprite, cam, backdrop, pos[i, mid], front[i], i)
        sprites.append(sprite)
        rows.append(_row(i, float(t), geom, seen, width, height))

    settings = {
        "seed": seed,
        "width": width,
        "height": height,
        "fps": fps,
        "frames": config.frames,
        "plain": config.plain,
        "view": cam.view,
        "table": backdrop.table_colour,
        "ball": ball.name,
        "ball_radius_px": round(ball.radius_px, 2),
        "shutter": round(ball.shutter, 3),
        "noise_sigma": round(effects.noise_sigma, 2),
        "jpeg_quality": effects.jpeg_quality,
        "distractors": len(distractors),
        "visible_frames": sum(r.visible for r in rows),
    }
    return ClipPlan(
        settings,
        rows,
        traj,
        cam,
        backdrop,
        ball,
        effects,
        sprites,
        front,
        back,
        distractors,
        frame_seed=int(rng.integers(2**63)),
    )


def _ball_sprite(path: np.ndarray, radius: np.ndarray, ball: Ball) -> Sprite | None:
    """Render one exposure from its PATH_SAMPLES positions, with fewer segments for short paths."""
    travel = float(np.hypot(*np.diff(path, axis=0).T).sum())
    segments = 4 if travel < 24 else 8 if travel < 120 else 16
    idx = np.linspace(0, PATH_SAMPLES - 1, segments + 1).astype(int)
    sprite = render_streak(
        path[idx], radius[idx], falloff_weights(segments, ball.falloff), ball.shading
    )
    return None if sprite is None else defocus(sprite, ball.defocus)


def _occlude(
    sprite: Sprite, cam: Camera, backdrop: Backdrop, centre: np.ndarray, front: list[Poses], i: int
) -> tuple[Sprite, bool]:
    """Hide what the table covers; return the sprite and whether at least half stays seen."""
    total = float(sprite.alpha.sum())
    if _behind_table(centre, cam.centre):
        keep = 1.0 - _patch(backdrop.table_mask, sprite)
        sprite = Sprite(sprite.x0, sprite.y0, sprite.alpha * keep, sprite.beta * keep)
    alpha = sprite.alpha
    if front:
        mask = np.zeros(alpha.shape, np.uint8)
        for p in front:
            draw_player(mask, cam, p, i, offset=(sprite.x0, sprite.y0), fill=(255.0, 255.0, 255.0))
        alpha = alpha * (1.0 - mask.astype(np.float32) / 255.0)
    return sprite, float(alpha.sum()) >= 0.5 * total


def _in_court(pos: np.ndarray) -> np.ndarray:
    """(F,) False once a ball low over the floor has left the court (it would be hidden by the
    barriers there, or picked up): inside the smallest barrier box the backdrop may draw."""
    out = (np.abs(pos[:, 0]) > COURT[0]) | (np.abs(pos[:, 1]) > COURT[1])
    return ~(out & (pos[:, 2] < FLOOR_Z + 0.5))


def _behind_table(ball: np.ndarray, camera: np.ndarray) -> bool:
    """The ball is below the table's surface and the line of sight crosses the table top."""
    if ball[2] >= 0.0 or camera[2] <= 0.0:
        return False
    s = camera[2] / (camera[2] - ball[2])
    x, y = camera[:2] + s * (ball[:2] - camera[:2])
    return abs(x) <= TABLE_HALF_LENGTH and abs(y) <= TABLE_HALF_WIDTH


def _patch(image: np.ndarray, sprite: Sprite) -> np.ndarray:
    """The (h, w) part of a frame-sized 2D ``image`` under the sprite; zero outside the frame."""
    out = np.zeros(sprite.alpha.shape, image.dtype)
    win = sprite_window(sprite, image.shape[1], image.shape[0])
    if win is not None:
        rows, cols, sprite_rows, sprite_cols = win
        out[sprite_rows, sprite_cols] = image[rows, cols]
    return out


def _row(
    i: int, t: float, geom: StreakGeometry, seen: bool, width: int, height: int
) -> FrameResult:
    x, y = float(geom.x[i]), float(geom.y[i])
    inside = -0.5 <= x < width - 0.5 and -0.5 <= y < height - 0.5
    if not (seen and inside):
        return FrameResult.invisible(i, t)
    return FrameResult(
        frame=i,
        time_s=t,
        visible=True,
        x=x,
        y=y,
        blur_angle_deg=float(geom.angle_deg[i]),
        blur_length_px=float(geom.length_px[i]),
        score=1.0,
    )


def write_clip(plan: ClipPlan, out_dir: Path, name: str) -> None:
    """``out_dir/name.mp4`` (mp4v) and ``out_dir/name.csv``; the video appears only once
    complete."""
    video, tmp = out_dir / f"{name}.mp4", out_dir / f".{name}.partial.mp4"
    size = (plan.settings["width"], plan.settings["height"])
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter.fourcc(*FOURCC), plan.settings["fps"], size)
    if not writer.isOpened():
        raise UserError(f"OpenCV cannot write {FOURCC} video to {tmp}")
    try:
        for frame in plan.frames():
            writer.write(frame)
        writer.release()
        os.replace(tmp, video)
    finally:
        writer.release()
        if tmp.exists():
            tmp.unlink()
    write_track_csv(out_dir / f"{name}.csv", plan.rows)
