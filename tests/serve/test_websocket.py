"""``held``, the hold an HTTP request takes on a session it feeds or finishes: refused while a
WebSocket drives the session, and looked up again once the lock is taken (the audit's race: a
frames request whose body was still arriving when a socket attached waited as long as the
socket lived, then answered 200 for a session already gone)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

pytest.importorskip("fastapi")

from ttball.serve.settings import ApiError
from ttball.serve.websocket import held, refuse_busy


@dataclass
class FakeSession:
    attached: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def lookup_in(store: dict[str, FakeSession], sid: str):
    def lookup() -> FakeSession:
        if sid not in store:
            raise ApiError(404, "unknown_session", f"no session {sid}")
        return store[sid]
    return lookup


def test_held_refuses_a_session_a_websocket_drives() -> None:
    async def go() -> None:
        store = {"a": FakeSession(attached=True)}
        with pytest.raises(ApiError) as refused:
            async with held("a", lookup_in(store, "a")):
                pass
        assert (refused.value.status, refused.value.code) == (409, "session_busy")
        assert not store["a"].lock.locked()

    asyncio.run(go())


def test_held_looks_the_session_up_again_after_waiting_for_the_lock() -> None:
    async def go() -> None:
        session = FakeSession()
        store = {"a": session}
        await session.lock.acquire()  # another request holds it
        entered = []

        async def second() -> None:
            async with held("a", lookup_in(store, "a")):
                entered.append(True)

        waiting = asyncio.create_task(second())
        await asyncio.sleep(0)
        del store["a"]  # deleted while the second request waited
        session.lock.release()
        with pytest.raises(ApiError) as gone:
            await waiting
        assert gone.value.status == 404 and entered == []
        assert not session.lock.locked()  # released on the way out

    asyncio.run(go())


def test_refuse_busy_while_a_request_or_a_socket_holds_the_session() -> None:
    async def go() -> None:
        session = FakeSession()
        refuse_busy(session, "a")  # idle: may be removed
        async with session.lock:
            with pytest.raises(ApiError, match="request in progress"):
                refuse_busy(session, "a")
        session.attached = True
        with pytest.raises(ApiError, match="WebSocket"):
            refuse_busy(session, "a")

    asyncio.run(go())
