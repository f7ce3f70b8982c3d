"""The Ray ingress's /v1/track stream, without a cluster: a replica that fails mid-video ends
the body with an error line (it was cut, the client's read failed), and a client gone stops the
replica's work (it tracked on to the video's end). Either way the router stops counting the
upload's key."""

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
