"""The ball's motion-blurred image and its ground truth, and per-frame camera effects.

A blurred ball is the time average of the moving disc over the exposure: each pixel gets
``background·(1 − α) + colour·β``, where α is the fraction of the exposure the disc covered
it (weighted by a symmetric brightness falloff towards the exposure's ends) and β the same with
the ball's own shading. Coverage is exact for a disc sliding along a straight segment (the
overlap of two intervals), the path is a polyline through sub-frame positions, and each pixel
is super-sampled 4×4 for anti-aliasing.

Ground truth (conventions of :mod:`ttball.results`) comes from the same sub-frame positions:
the streak's direction is the principal axis of the ball centre's path, (x, y) the middle of
the path's extent along it, ``blur_length_px`` half that extent plus the ball's radius.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

SUPERSAMPLE = 4
MAX_SPRITE_PX = 1200  # a ball this close to the camera is not drawn (and not labelled visible)
JPEG_BLOCK = 16  # pixels of one JPEG MCU with 4:2:0 chroma, OpenCV's default


@dataclass(frozen=True)
class Sprite:
    """A rendered streak: coverage ``alpha`` and shaded coverage ``beta`` (h, w) float32 whose
    top-left pixel is frame pixel (x0, y0)."""

    x0: int
    y0: int
    alpha: np.ndarray
    beta: np.ndarray


@dataclass(frozen=True)
class StreakGeometry:
    """Per frame (F,): blur centre x, y (pixels), angle in (-90, 90] degrees, half length."""

    x: np.ndarray
    y: np.ndarray
    angle_deg: np.ndarray
    length_px: np.ndarray


def streak_geometry(path: np.ndarray, radius: np.ndarray) -> StreakGeometry:
    """``path`` (F, S, 2): ball centre at S instants spread over each frame's exposure;
    ``radius`` (F, S) pixels."""
    mean = path.mean(axis=1, keepdims=True)
    c = path - mean
    cxx, cyy = (c[..., 0] ** 2).mean(1), (c[..., 1] ** 2).mean(1)
    cxy = (c[..., 0] * c[..., 1]).mean(1)
    theta = 0.5 * np.arctan2(2 * cxy, cxx - cyy)
    u = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    proj = (c * u[:, None, :]).sum(-1)
    lo, hi = proj.min(1), proj.max(1)
    centre = mean[:, 0] + u * ((lo + hi) / 2)[:, None]
    angle = np.degrees(theta)
    angle = np.where(angle <= -90.0, angle + 180.0, angle)
    return StreakGeometry(centre[:, 0], centre[:, 1], angle, (hi - lo) / 2 + radius.mean(1))


def falloff_weights(segments: int, falloff: float) -> np.ndarray:
    """Weight (segments,) of each equal-time piece of the exposure: 1 in the middle, dimming
    by ``falloff`` towards both ends (symmetric, so the streak's centroid stays centred)."""
    tau = (np.arange(segments) + 0.5) / segments
    return (1.0 - falloff * (2 * tau - 1) ** 2) / segments


def render_streak(
    centres: np.ndarray, radii: np.ndarray, weights: np.ndarray, shading: float
) -> Sprite | None:
    """``centres`` (K+1, 2) pixel positions along the exposure, ``radii`` (K+1,), ``weights``
    (K,) per segment; ``shading`` darkens the disc towards its rim (0 = flat)."""
    pad = float(radii.max()) + 2.0
    x0, y0 = int(np.floor(centres[:, 0].min() - pad)), int(np.floor(centres[:, 1].min() - pad))
    x1, y1 = (
        int(np.ceil(centres[:, 0].max() + pad)) + 1,
        int(np.ceil(centres[:, 1].max() + pad)) + 1,
    )
    if x1 - x0 > MAX_SPRITE_PX or y1 - y0 > MAX_SPRITE_PX:
        return None
    alpha = np.zeros((y1 - y0, x1 - x0), np.float32)
    beta = np.zeros_like(alpha)
    off = (np.arange(SUPERSAMPLE, dtype=np.float32) + 0.5) / SUPERSAMPLE - 0.5
    for k in range(len(weights)):
        a, b = centres[k], centres[k + 1]
        r = 0.5 * float(radii[k] + radii[k + 1])
        wx0 = int(np.floor(min(a[0], b[0]) - r - 1)) - x0
        wy0 = int(np.floor(min(a[1], b[1]) - r - 1)) - y0
        wx1 = int(np.ceil(max(a[0], b[0]) + r + 1)) - x0 + 1
        wy1 = int(np.ceil(max(a[1], b[1]) + r + 1)) - y0 + 1
        qx = (np.arange(wx0, wx1, dtype=np.float32) + x0)[None, :] + off[:, None]  # (ss, ww)
        qy = (np.arange(wy0, wy1, dtype=np.float32) + y0)[None, :] + off[:, None]  # (ss, hh)
        cov, shade = _segment_coverage(qx, qy, a, b, r, shading)
        alpha[wy0:wy1, wx0:wx1] += weights[k] * cov
        beta[wy0:wy1, wx0:wx1] += weights[k] * shade
    return Sprite(x0, y0, alpha, beta)


def _segment_coverage(
    qx: np.ndarray, qy: np.ndarray, a: np.ndarray, b: np.ndarray, r: float, shading: float
) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of the time a disc of radius r sliding at constant speed from a to b covers
    each sub-sample, averaged per pixel → (hh, ww) coverage and shaded coverage."""
    seg = b - a
    length = float(np.hypot(*seg))
    ux, uy = (seg / length) if length > 1e-6 else (1.0, 0.0)
    length = max(length, 1e-6)
    dx = qx[None, :, None, :] - a[0]  # (1, ss, 1, ww)
    dy = qy[:, None, :, None] - a[1]  # (ss, 1, hh, 1)
    along = dx * ux + dy * uy  # (ss, ss, hh, ww)
    across = dy * ux - dx * uy
    half = np.sqrt(np.maximum(r * r - across * across, 0.0))
    frac = (
        np.clip(np.minimum(along + half, length) - np.maximum(along - half, 0.0), 0.0, None)
        / length
    )
    beyond = np.maximum(np.maximum(-along, along - length), 0.0)
    shade = 1.0 - shading * np.minimum((across * across + beyond * beyond) / (r * r), 1.0)
    return frac.mean(axis=(0, 1)), (frac * shade).mean(axis=(0, 1))


def defocus(sprite: Sprite, sigma: float) -> Sprite:
    if sigma <= 0:
        return sprite
    k = (0, 0)
    return Sprite(
        sprite.x0,
        sprite.y0,
        cv2.GaussianBlur(sprite.alpha, k, sigma),
        cv2.GaussianBlur(sprite.beta, k, sigma),
    )


def sprite_window(
    sprite: Sprite, width: int, height: int
) -> tuple[slice, slice, slice, slice] | None:
    """(frame rows, frame cols, sprite rows, sprite cols) of the sprite's part inside the frame."""
    h, w = sprite.alpha.shape
    fx0, fy0 = max(sprite.x0, 0), max(sprite.y0, 0)
    fx1, fy1 = min(sprite.x0 + w, width), min(sprite.y0 + h, height)
    if fx0 >= fx1 or fy0 >= fy1:
        return None
    return (
        slice(fy0, fy1),
        slice(fx0, fx1),
        slice(fy0 - sprite.y0, fy1 - sprite.y0),
        slice(fx0 - sprite.x0, fx1 - sprite.x0),
    )


def composite(img: np.ndarray, sprite: Sprite, colour: np.ndarray) -> None:
    """Blend the streak into ``img`` (H, W, 3) uint8 in place; ``colour`` (3,) may exceed 255
    (a bright ball saturates the sensor where it dwells)."""
    win = sprite_window(sprite, img.shape[1], img.shape[0])
    if win is None:
        return
    fr, fc, sr, sc = win
    roi = img[fr, fc].astype(np.float32)
    a = sprite.alpha[sr, sc][..., None]
    b = sprite.beta[sr, sc][..., None]
    out = roi * (1.0 - a) + b * colour.astype(np.float32)
    img[fr, fc] = np.clip(out + 0.5, 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class CameraEffects:
    """Per-frame lighting gain, sensor noise and JPEG degradation of a clip."""

    gains: np.ndarray  # (F,) multiplicative exposure per frame
    noise_sigma: float
    jpeg_quality: int  # 0 = off
    noise_bank: tuple[np.ndarray, ...] = ()

    @classmethod
    def sample(
        cls, rng: np.random.Generator, times: np.ndarray, width: int, height: int, plain: bool
    ) -> CameraEffects:
        if plain:
            return cls(np.ones(len(times)), 0.0, 0)
        slow = rng.uniform(0.0, 0.08) * np.sin(
            2 * np.pi * rng.uniform(0.05, 0.5) * times + rng.uniform(0, 6.3)
        )
        flicker = rng.uniform(0.0, 0.03) * np.sin(2 * np.pi * 100.0 * times + rng.uniform(0, 6.3))
        gains = rng.uniform(0.85, 1.15) * (1.0 + slow + flicker)
        sigma = float(rng.uniform(0.0, 6.0))
        bank: tuple[np.ndarray, ...] = ()
        if sigma >= 0.5:
            bank = tuple(_noise(rng, width + 16, height + 16, sigma) for _ in range(3))
        jpeg = int(rng.integers(35, 93)) if rng.random() < 0.5 else 0
        return cls(gains, sigma, jpeg, bank)

    def draw(self, rng: np.random.Generator) -> tuple[int, int, int] | None:
        """One frame's random draws: the noise field's offset (dy, dx) and which field."""
        if not self.noise_bank:
            return None
        dy, dx = rng.integers(0, 16, 2)
        return int(dy), int(dx), int(rng.integers(len(self.noise_bank)))

    def apply(
        self,
        img: np.ndarray,
        i: int,
        draws: tuple[int, int, int] | None,
        region: tuple[int, int, int, int] | None = None,
    ) -> np.ndarray:
        """Frame ``i``'s effects on ``img`` (which it may change in place) with ``draw``'s draws.

        With ``region`` (x0, y0, x1, y1), the effects are computed only on a block-aligned area
        around it: the pixels inside ``region`` are the same as with the whole frame, those
        far outside it are left without the effects.
        """
        h, w = img.shape[:2]
        x0, y0, x1, y1 = (0, 0, w, h) if region is None else _jpeg_aligned(region, w, h)
        whole = (x0, y0, x1, y1) == (0, 0, w, h)
        part = img if whole else np.ascontiguousarray(img[y0:y1, x0:x1])
        g = float(self.gains[i])
        if abs(g - 1.0) > 1e-3:
            cv2.convertScaleAbs(part, dst=part, alpha=g)
        if draws is not None:
            dy, dx, k = draws
            noise = self.noise_bank[k][dy + y0 : dy + y1, dx + x0 : dx + x1]
            cv2.add(part, noise, dst=part, dtype=cv2.CV_8U)
        if self.jpeg_quality:
            ok, buf = cv2.imencode(".jpg", part, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
            decoded = cv2.imdecode(buf, cv2.IMREAD_COLOR) if ok else None
            if decoded is not None:
                part = decoded
        if whole:
            return part
        img[y0:y1, x0:x1] = part
        return img


def _jpeg_aligned(region: tuple[int, int, int, int], w: int, h: int) -> tuple[int, int, int, int]:
    """``region`` grown to JPEG's 16-pixel blocks (4:2:0) on the frame's grid, plus one block
    of margin, within the frame. A JPEG of that part codes the same blocks as a JPEG of the whole
    frame (the encoder works block by block), and its decoder's chroma upsampling, which reads
    one pixel into the neighbouring block, differs from the whole frame's only in the margin."""
    x0, y0, x1, y1 = region
    b = JPEG_BLOCK
    return (
        max((x0 // b - 1) * b, 0),
        max((y0 // b - 1) * b, 0),
        min((-(-x1 // b) + 1) * b, w),
        min((-(-y1 // b) + 1) * b, h),
    )


def _noise(rng: np.random.Generator, width: int, height: int, sigma: float) -> np.ndarray:
    """Sensor noise field (height, width, 3) int16, seeded from ``rng`` (cv2.randn is 3× faster
    than numpy's normal sampler for a 1280×720 field)."""
    cv2.setRNGSeed(int(rng.integers(2**31)))
    fine = np.empty((height, width, 3), np.int16)
    cv2.randn(fine, 0, sigma)  # type: ignore[call-overload]  # cv2's stubs want arrays
    return fine
