"""Shared fixtures: a tiny-input checkpoint and synthetic clips drawn by the tests."""

from __future__ import annotations

import os
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from ttball.model import BlurBall, randomize_batchnorm, save_checkpoint
from ttball.model.config import WeightsConfig

# Exports and compile caches of the tests go to a throwaway folder, never to ~/.cache.
os.environ.setdefault("TTBALL_CACHE_DIR", tempfile.mkdtemp(prefix="ttball-test-cache-"))
# Without a GPU the Triton kernels run in Triton's interpreter, which must be chosen before
# anything imports triton (tests/kernels/kernel_env.py); set here, before any test module is
# collected, so that a module collected earlier that imports triton cannot make the kernel
# tests skip (it did once: 37 of them, silently, through a script's test in tests/bench).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

SMALL = (72, 128)  # (height, width): the network is fully convolutional; 16x fewer FLOPs


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test (and the module fixtures it sets up) starts from one torch RNG state: models
    built with ``BlurBall()`` drew their weights from whatever earlier tests had left, so a
    kernel test's error against its reference depended on the order tests ran in (2.0067e-3
    against a 2e-3 bound after the stream and verify tests)."""
    torch.manual_seed(0)


def draw_clip(
    path: Path, frames: int = 12, size: tuple[int, int] = (320, 180), fps: float = 30.0,
    codec: str = "mp4v",
) -> list[tuple[float, float]]:
    """Write a clip of a white ball moving across a green table; returns its centres."""
    w, h = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*codec), fps, (w, h))
    centres = []
    for i in range(frames):
        img = np.full((h, w, 3), (40, 90, 30), np.uint8)
        cx, cy = 20 + i * (w - 40) / max(frames - 1, 1), h / 2 + 20 * np.sin(i / 3)
        cv2.circle(img, (round(cx), round(cy)), 4, (255, 255, 255), -1)
        writer.write(img)
        centres.append((cx, cy))
    writer.release()
    return centres



def with_exif_orientation(image: bytes, orientation: int) -> bytes:
    """A JPEG with an EXIF segment (APP1) right after its start marker, or a PNG with an eXIf
    chunk right after its header chunk, whose one tag is Orientation (0x0112; 6: to be turned
    90° clockwise for display)."""
    tiff = (b"MM\x00\x2a\x00\x00\x00\x08" + b"\x00\x01"  # big-endian, IFD at 8, one entry
            + b"\x01\x12\x00\x03\x00\x00\x00\x01" + orientation.to_bytes(2, "big") + b"\x00\x00"
            + b"\x00\x00\x00\x00")  # no next IFD
    if image.startswith(b"\x89PNG\r\n\x1a\n"):
        after_header = 8 + 8 + 13 + 4  # the signature, then IHDR: length, type, 13 bytes, CRC
        chunk = (len(tiff).to_bytes(4, "big") + b"eXIf" + tiff
                 + zlib.crc32(b"eXIf" + tiff).to_bytes(4, "big"))
        return image[:after_header] + chunk + image[after_header:]
    payload = b"Exif\x00\x00" + tiff
    return image[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + image[2:]

@pytest.fixture(scope="module")
def one_cpu_thread() -> Iterator[None]:
    """One intra-op thread: on a shared 2-core machine two OpenMP threads wait on each other
    (the quick bench test took 35 s with two threads and 9 s with one under load 3)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def small_config() -> WeightsConfig:
    return WeightsConfig(name="test-small", input_height=SMALL[0], input_width=SMALL[1])


@pytest.fixture(scope="session")
def small_model(small_config: WeightsConfig) -> BlurBall:
    torch.manual_seed(0)
    model = randomize_batchnorm(BlurBall()).eval()
    model.config = small_config
    return model


@pytest.fixture(scope="session")
def small_weights(tmp_path_factory: pytest.TempPathFactory, small_model: BlurBall) -> Path:
    path = tmp_path_factory.mktemp("weights") / "small.safetensors"
    save_checkpoint(path, small_model, small_model.config)
    return path


@pytest.fixture()
def cache_backends(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict]:
    """Two eager backends registered for the test, ``test-cached`` (tagged ``disk-cache``) and
    ``test-plain``: the dict they fill with the options each was created with (``--compile-
    cache``'s ``cache_dir`` reaches only the first)."""
    from ttball.backends import base
    from ttball.backends.eager import EagerBackend

    given: dict[str, dict] = {}

    def factory(tag):  # type: ignore[no-untyped-def]
        def make(model, device, **options):  # type: ignore[no-untyped-def]
            given[tag] = options
            return EagerBackend(model, device)
        return make

    for name, tags in (("test-cached", ("disk-cache",)), ("test-plain", ())):
        entry = base.BackendSpec(name, factory(name), name, base._always, frozenset(tags))
        monkeypatch.setitem(base._REGISTRY, name, entry)
    return given


@pytest.fixture()
def clip(tmp_path: Path) -> Path:
    path = tmp_path / "clip.mp4"
    draw_clip(path)
    return path


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster for one test module (2 CPUs, loopback, no dashboard), started the
    way ``ttball`` starts its own (tests/distributed: inside a loopback-only namespace)."""
    import ray

    from ttball.distributed.archive import _connect

    _connect(None, num_cpus=2)
    yield
    ray.shutdown()



def refuse(*args: object, **kwargs: object) -> None:
    """A stand-in for what a check must stop before: reaching it fails the test."""
    raise AssertionError("got past the checks")


@pytest.fixture
def no_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve's checks must fail before the application is built or the port taken."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import ttball.serve.app

    monkeypatch.setattr(ttball.serve.app, "create_app", refuse)
    monkeypatch.setattr(ttball.serve.app, "listen_socket", refuse)
