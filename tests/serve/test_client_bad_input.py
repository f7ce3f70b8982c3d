"""``ttball.client`` refuses bad arguments with a TypeError/ValueError naming what it takes,
before anything reaches the worker (which then still serves the session as if nothing had
happened), instead of a traceback from deep inside httpx, json or numpy, or a frame the worker
refuses later."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from conftest import SMALL
from one_thread_worker import one_thread_worker

from ttball.client import Client, pack_records
from ttball.serve import ServeSettings

H, W = SMALL


@pytest.fixture(scope="module")
def server(small_weights: Path):
    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1,),
                             torch_threads=1, decode_threads=1)
    with one_thread_worker(settings) as client:
        yield client


def jpeg(value: int = 0) -> bytes:
    return cv2.imencode(".jpg", np.full((90, 160, 3), value, np.uint8))[1].tobytes()


def test_a_path_is_not_a_frame(server: Client, tmp_path: Path) -> None:
    """A str said 'string argument without an encoding', a Path 'not subscriptable'."""
    image = tmp_path / "f.jpg"
    image.write_bytes(jpeg())
    session = server.open_session()
    for given in (str(image), image):
        with pytest.raises(TypeError, match=r"JPEG/PNG bytes or an RGB \(H, W, 3\) uint8 numpy "
                                            r"array, got .*read it first: Path\(p\)\.read_bytes"):
            session.send(given)  # type: ignore[arg-type]
    assert session.describe()["frames"] == 0
    session.send(image.read_bytes())
    session.send(bytearray(jpeg(5)))  # other bytes-like objects still go
    assert session.describe()["frames"] == 2
    session.delete()


def test_send_many_wants_a_list(server: Client) -> None:
    """One bytes object was taken as a list of ints: "object of type 'int' has no len()"."""
    session = server.open_session()
    with pytest.raises(TypeError, match="images: expected a list of JPEG/PNG bytes, got one "
                                        "bytes"):
        session.send_many(jpeg())
    with pytest.raises(TypeError, match=r"images\[1\]: expected JPEG/PNG bytes, got str"):
        session.send_many([jpeg(), "b.jpg"])  # type: ignore[list-item]
    assert session.describe()["frames"] == 0
    session.send_many([jpeg(1), jpeg(2), jpeg(3)])
    assert session.describe()["frames"] == 3
    assert pack_records([b"ab"]) == b"\x00\x00\x00\x02ab"
    session.delete()


def test_stream_send_refuses_what_the_socket_cannot_carry(server: Client) -> None:
    """An array went out as its raw buffer and came back as a not_an_image error later."""
    session = server.open_session()
    with session.stream() as ws:
        with pytest.raises(TypeError, match="expected JPEG/PNG bytes, got ndarray .*Session.send"):
            ws.send(np.zeros((90, 160, 3), np.uint8))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="got str; to send a file, read it first"):
            ws.send("f.jpg")  # type: ignore[arg-type]
        ws.send(jpeg())
        messages = ws.finish(timeout=60)
    assert [m["type"] for m in messages] == ["result"], messages


@pytest.mark.parametrize("option", ["threshold", "dedup_ssim", "fps"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_open_session_refuses_non_finite_numbers(server: Client, option: str,
                                                 value: float) -> None:
    """NaN reached the JSON encoder: 'Out of range float values are not JSON compliant'."""
    before = len(server._json("GET", "/v1/sessions")["sessions"])
    with pytest.raises(ValueError, match=f"open_session: {option} must be a finite number"):
        server.open_session(**{option: value})
    assert len(server._json("GET", "/v1/sessions")["sessions"]) == before


def test_infer_refuses_raw_pixels(server: Client) -> None:
    """uint8 windows went out un-normalised and came back as logits of nonsense."""
    pixels = np.random.default_rng(0).integers(0, 255, (1, 9, H, W)).astype(np.uint8)
    for binary in (True, False):
        with pytest.raises(TypeError, match="frames are preprocessed float32 windows .*"
                                            "ttball.frames.preprocess.*got uint8"):
            server.infer(pixels, binary=binary)
    with pytest.raises(TypeError, match="got <U3"):
        server.infer("abc")  # type: ignore[arg-type]
    window = np.random.default_rng(1).standard_normal((1, 9, H, W))  # float64 is fine
    assert server.infer(window).shape == (1, 3, H, W)
