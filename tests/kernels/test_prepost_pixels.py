"""The pixel kernels of ``ttball.kernels.prepost_pixels``: the resize (``Resizer(mode="triton")``)
against the eager taps and ``cv2.resize``, and the normalisation (``Normalizer``) against
``ttball.frames.normalize`` on the CPU: equal bit for bit, in Triton's interpreter on CPU
(compiled on a GPU); and the runs the resize reads frames from in place."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from kernel_env import CUDA, DEVICE, require_triton

from ttball.kernels.prepost_image import RESIZE_MODES, Resizer

require_triton()
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

# (after require_triton: the module imports triton)
from ttball.kernels.prepost_pixels import Normalizer, resize, runs

SIZES = [  # (source w, h) → (network w, h): small, so the interpreter is quick
    ((160, 90), (64, 36)),  # the real case's 2.5x down
    ((64, 20), (36, 40)),  # down in x, up in y
    ((50, 30), (64, 36)),  # up
    ((128, 72), (64, 36)),  # exactly 2x: OpenCV switches to INTER_AREA
    ((167, 93), (64, 36)),  # odd
    ((700, 6), (600, 4)),  # an output row wider than a block: the kernel loops over it
]


def noise(w: int, h: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def chw(rgb: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(rgb).permute(2, 0, 1).to(DEVICE)


@pytest.mark.parametrize(("src", "dst"), SIZES)
def test_the_kernel_is_bit_exact_with_the_taps_and_cv2(src, dst) -> None:
    frames = [noise(*src, seed) for seed in range(2)]
    permuted = torch.stack([chw(f) for f in frames])  # strides of (H, W, 3) memory
    contiguous = permuted.contiguous()  # a decoded (3, H, W) frame's
    eager = Resizer(dst[1], dst[0])
    triton_resizer = Resizer(dst[1], dst[0], mode="triton")
    want = eager(contiguous)
    for batch in (permuted, contiguous):
        got = triton_resizer(batch)
        assert got.is_contiguous() and torch.equal(got, want)
    assert triton_resizer.running == "triton" and triton_resizer.compile_error is None
    for f, g in zip(frames, want.cpu()):
        assert torch.equal(g.permute(1, 2, 0), torch.from_numpy(
            cv2.resize(f, dst, interpolation=cv2.INTER_LINEAR)))


def test_the_kernel_writes_into_out_and_checks_it() -> None:
    resizer = Resizer(18, 32)
    frames = torch.stack([chw(noise(80, 45, s)) for s in range(3)])
    tables = resizer._table(45, 80, frames.device)
    out = torch.full((3, 3, 18, 32), 7, dtype=torch.uint8, device=DEVICE)
    resize(frames[1:], *tables, out=out[1:])
    assert torch.equal(out[1:], resizer(frames[1:])) and (out[0] == 7).all()
    with pytest.raises(ValueError, match="contiguous uint8"):
        resize(frames, *tables, out=out[:2])
    assert resize(frames[:0], *tables).shape == (0, 3, 18, 32)


def test_runs_are_views_of_the_frames_in_place() -> None:
    a = torch.stack([chw(noise(40, 20, s)) for s in range(4)]).clone()  # one decode child's run
    b = torch.stack([chw(noise(40, 20, s)) for s in range(4, 6)]).clone()  # the other's
    frames = [*a.unbind(0), *b.unbind(0)]
    views = runs(frames)
    assert [len(v) for v in views] == [4, 2]
    for view, base in zip(views, (a, b)):
        assert view.data_ptr() == base.data_ptr() and torch.equal(view, base)
    # a repeat (the same tensor again), a frame out of order, one alone, a permuted frame
    lone = chw(noise(40, 20, 9)).contiguous()
    mixed = [a[0], a[0], a[2], lone, a[1], chw(noise(40, 20, 3))]
    assert [len(v) for v in runs(mixed)] == [2, 1, 1, 1, 1]
    flat = [f for view in runs(mixed) for f in view]
    assert len(flat) == len(mixed) and all(torch.equal(f, g) for f, g in zip(flat, mixed))
    gapped = [a[0], a[2]]  # equal distances of two frames: one run
    assert [len(v) for v in runs(gapped)] == [2] and torch.equal(runs(gapped)[0][1], a[2])


def test_a_list_of_frames_is_resized_in_place_or_stacked() -> None:
    """A decode call's frames (two runs) are read where they lie; frames in more than
    MAX_RUNS runs are stacked first; both equal the eager resize of their stack."""
    a = torch.stack([chw(noise(80, 45, s)) for s in range(3)]).clone()
    b = torch.stack([chw(noise(80, 45, s)) for s in range(3, 5)]).clone()
    scattered = [chw(noise(80, 45, s)).contiguous() for s in range(5, 11)]  # six runs
    triton_resizer, eager = Resizer(18, 32, mode="triton"), Resizer(18, 32)
    for frames in ([*a.unbind(0), *b.unbind(0)], scattered, [a[1]]):
        got = triton_resizer(frames)
        assert torch.equal(got, eager(torch.stack(frames)))
        assert torch.equal(eager(frames), got)  # eager takes a list too (stacked)
    same = [chw(noise(32, 18, 0))]  # already the network's size: returned as is, stacked
    assert torch.equal(triton_resizer(same), same[0][None])


def test_a_failing_kernel_falls_back_to_eager_and_says_why(monkeypatch) -> None:
    resizer = Resizer(18, 32, mode="triton")

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel today")

    monkeypatch.setattr(resizer, "_core", broken)
    frames = torch.stack([chw(noise(80, 45, s)) for s in range(2)])
    assert torch.equal(resizer(frames), Resizer(18, 32)(frames))
    assert resizer.running == "eager" and resizer.compile_error == "RuntimeError: no kernel today"
    listed = Resizer(18, 32, mode="triton")  # a list falls back too
    listed._core = broken
    assert torch.equal(listed(list(frames.unbind(0))), Resizer(18, 32)(frames))
    assert listed.running == "eager"


def test_the_modes_are_checked() -> None:
    assert RESIZE_MODES == ("eager", "compile", "triton")
    with pytest.raises(ValueError, match="mode must be one of"):
        Resizer(18, 32, mode="fast")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_real_size_compiled_on_the_gpu() -> None:
    """1280x720 → 512x288 (the interpreter is too slow for it), as a decode call's frames lie:
    two runs of a buffer, read in place; then a window of them normalised, equal to the CPU's
    normalize (compiled, the kernel's lookup must not be contracted or approximated)."""
    frames = [noise(1280, 720, seed) for seed in range(6)]
    runs_of = [torch.stack([chw(f) for f in frames[:4]]).contiguous(),
               torch.stack([chw(f) for f in frames[4:]]).contiguous()]
    listed = [f for run in runs_of for f in run.unbind(0)]
    got = Resizer(288, 512, mode="triton")(listed)
    assert torch.equal(got, Resizer(288, 512)(torch.stack(listed)))
    for f, g in zip(frames, got.cpu()):
        assert torch.equal(g.permute(1, 2, 0), torch.from_numpy(
            cv2.resize(f, (512, 288), interpolation=cv2.INTER_LINEAR)))
    from ttball.frames import normalize
    from ttball.model.config import WeightsConfig

    config = WeightsConfig()
    windows = got[:3].reshape(1, 9, 288, 512)
    norm = Normalizer(config, got.device)
    assert torch.equal(norm(windows).cpu(), normalize(windows.cpu(), config))
    assert norm.error is None


@pytest.mark.skipif(CUDA, reason="a pipeline on CPU tensors, whose kernels only the interpreter "
                    "runs; on a GPU the real-size test covers the kernels")
def test_a_pipeline_with_the_kernel_gives_the_eager_rows(small_config) -> None:
    """GpuPipeline(resize="triton") (``serve --pipeline-resize triton``: the resize and the
    normalisation as kernels): the same rows as the eager pipeline, pushes of two frames (each its own run: read in place, a launch each) and
    a repeat (the same bytes again: its session's last frame resized again)."""
    from test_prepost import cpu_pipeline, gpu_rows, session_frames

    from ttball.stream import StreamOptions

    sessions = {"a": (session_frames(9, (320, 180), streak=True), StreamOptions(step=3))}
    eager = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=2)
    kernel = cpu_pipeline(small_config, resize="triton")
    got = gpu_rows(kernel, sessions, 60.0, chunk=2)
    assert kernel.resizer.running == "triton" and kernel.resizer.compile_error is None
    assert kernel.normalizing == ("triton", None)
    assert {sid: [r.as_dict() for r in rows] for sid, rows in got.items()} == \
        {sid: [r.as_dict() for r in rows] for sid, rows in eager.items()}


def test_the_normalizer_is_the_cpu_normalize_bit_for_bit(small_config) -> None:
    """Every level in every channel, and a random batch whose plane is not a multiple of the
    kernel's block; the torch lookup (its fallback) is equal too."""
    from ttball.frames import normalize

    g = torch.Generator().manual_seed(0)
    levels = torch.arange(256, dtype=torch.uint8).expand(2, 9, 1, 256).contiguous()
    noisy = torch.randint(0, 256, (3, 9, 7, 150), dtype=torch.uint8, generator=g)
    norm = Normalizer(small_config, DEVICE)
    for windows in (levels, noisy):
        want = normalize(windows, small_config)  # on the CPU: true divisions
        got = norm(windows.to(DEVICE))
        assert got.dtype == torch.float32 and torch.equal(got.cpu(), want)
        assert torch.equal(norm.reference(windows.to(DEVICE)).cpu(), want)
    assert norm.running == "triton" and norm.error is None
    assert norm(levels[:0].to(DEVICE)).shape == (0, 9, 1, 256)
    with pytest.raises(ValueError, match="uint8 windows"):
        norm(levels.float())


def test_a_failing_normalizer_kernel_falls_back_to_the_lookup(small_config, monkeypatch) -> None:
    from ttball.frames import normalize

    norm = Normalizer(small_config, DEVICE)

    def broken(windows):
        raise RuntimeError("no kernel today")

    monkeypatch.setattr(norm, "_kernel", broken)
    windows = torch.randint(0, 256, (1, 9, 4, 6), dtype=torch.uint8)
    assert torch.equal(norm(windows.to(DEVICE)).cpu(), normalize(windows, small_config))
    assert norm.running == "lookup" and norm.error == "RuntimeError: no kernel today"
