"""The Ray ingress without a cluster. Its /v1/track stream: a replica that fails mid-video ends
the body with an error line (it was cut, the client's read failed), and a client gone stops the
replica's work (it tracked on to the video's end); either way the router stops counting the
upload's key. Its calls, with a stand-in for the replicas' handle: a video goes on in pieces,
a failed upload is dropped, and a refused open leaves no count in the router."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("ray")

import ttball.distributed.serve_routes as routes
from ttball.distributed.serve_routes import _rest


@pytest.fixture(autouse=True)
def released(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys the routes release from the router."""
    keys: list[str] = []
    monkeypatch.setattr(routes, "release", keys.append)
    return keys


class _Lines:
    """Stands in for a Ray DeploymentResponseGenerator: ``lines``, then ``error`` if given."""

    def __init__(self, lines: list[bytes], error: BaseException | None = None) -> None:
        self.lines, self.error, self.cancelled = lines, error, False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[bytes]:
        for line in self.lines:
            yield line
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        self.cancelled = True


async def _read(body: AsyncIterator[bytes], limit: int | None = None) -> list[bytes]:
    out = []
    async for line in body:
        out.append(line)
        if limit is not None and len(out) == limit:
            break
    return out


def test_a_replica_lost_mid_video_ends_the_stream_with_an_error_line(released) -> None:
    import ray.exceptions as rx

    lines = _Lines([b'{"frame": 1}\n'], rx.RayActorError())
    got = asyncio.run(_read(_rest(b'{"frame": 0}\n', lines, "upload:k")))
    assert got[:2] == [b'{"frame": 0}\n', b'{"frame": 1}\n']
    assert json.loads(got[2])["error"]["code"] == "replica_lost"
    assert lines.cancelled and released == ["upload:k"]


def test_a_client_gone_cancels_the_replica_s_work(released) -> None:
    async def go() -> _Lines:
        lines = _Lines([b"x\n"] * 100)
        body = _rest(b"first\n", lines, "upload:k")
        assert await _read(body, limit=3) == [b"first\n", b"x\n", b"x\n"]
        await body.aclose()  # what the server does when the client hangs up
        return lines

    assert asyncio.run(go()).cancelled and released == ["upload:k"]


# -- the ingress's calls, with a stand-in for the replicas' handle ----------------------------------
class _Handle:
    """Stands in for the replicas' DeploymentHandle: records each call as (method, routing key,
    args) and answers with ``answer(method, *args)`` (raised when it is an exception)."""

    def __init__(self, answer, calls=None, method=None, key=None) -> None:
        self.answer, self.calls, self.method, self.key = answer, [] if calls is None else calls, method, key

    def options(self, method_name=None, stream=False, session_id=None) -> _Handle:
        return _Handle(self.answer, self.calls, method_name or self.method, session_id or self.key)

    def remote(self, *args):
        self.calls.append((self.method, self.key, args))

        async def reply():
            result = self.answer(self.method, *args)
            if isinstance(result, BaseException):
                raise result
            return result

        return reply()


def _ingress(answer, chunk: int = 4):
    from ttball.distributed.serve_ingress import Ingress
    from ttball.serve import ServeSettings

    ingress = Ingress(_Handle(answer), ServeSettings(), max_replicas=2, upload_chunk_bytes=chunk)
    ingress.replicas = [{"readiness": {"ready": True}}]
    return ingress


@pytest.fixture
def router_released(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys the ingress releases from the router."""
    import ttball.distributed.serve_ingress as module

    keys: list[str] = []
    monkeypatch.setattr(module, "release", keys.append)
    return keys


def test_an_open_a_replica_refuses_leaves_no_count_in_the_router(router_released) -> None:
    from ttball.serve.sessions import SessionOptions
    from ttball.serve.settings import ApiError

    full = ApiError(429, "too_many_sessions", "64 sessions open (the limit)")
    ingress = _ingress(lambda method, *args: full)
    with pytest.raises(ApiError) as refused:
        asyncio.run(ingress.open(SessionOptions.from_json({})))
    assert refused.value.status == 429 and ingress.sessions == {}
    [(method, key, _)] = ingress.workers.calls
    assert method == "open" and router_released == [key]  # it counted for 10 min before


def test_a_video_goes_on_in_pieces_of_the_chunk_size(router_released) -> None:
    held: dict[str, bytes] = {}

    def replica(method, key, suffix, offset, data):
        assert offset == len(held.get(key, b""))
        held[key] = held.get(key, b"") + data
        return len(held[key])

    async def body():
        for piece in (b"abc", b"defghij", b"k"):
            yield piece

    ingress = _ingress(replica, chunk=4)
    assert asyncio.run(ingress.upload("upload:v", ".mp4", body())) == 11
    assert [args[2:] for _, _, args in ingress.workers.calls] == [
        (0, b"abcd"), (4, b"efgh"), (8, b"ijk")]
    assert {key for _, key, _ in ingress.workers.calls} == {"upload:v"}  # one replica's
    assert held == {"upload:v": b"abcdefghijk"} and router_released == []


@pytest.mark.parametrize("failure", ["refused", "replica_lost", "client_gone"])
def test_a_failed_upload_is_dropped_by_its_replica_and_released(router_released,
                                                                failure: str) -> None:
    import ray.exceptions as rx

    from ttball.serve.settings import ApiError

    def replica(method, *args):
        if method == "discard":
            return None
        _, _, offset, data = args
        if offset == 4:  # the second piece
            if failure == "refused":
                return ApiError(503, "upload_failed", "the replica could not store the video")
            if failure == "replica_lost":
                return rx.RayActorError()
        return offset + len(data)

    async def body():
        yield b"abcd"
        yield b"efgh"
        if failure == "client_gone":
            raise OSError("the client went away")
        yield b"ij"

    async def go(ingress):
        with pytest.raises((ApiError, OSError)) as failed:
            await ingress.upload("upload:v", ".mp4", body())
        for _ in range(5):  # the discard runs on a task of its own
            await asyncio.sleep(0)
        return failed.value

    ingress = _ingress(replica, chunk=4)
    error = asyncio.run(go(ingress))
    if failure == "replica_lost":
        assert (error.status, error.code) == (503, "upload_lost")
    assert ingress.workers.calls[-1][:2] == ("discard", "upload:v")
    assert router_released == ["upload:v"]
