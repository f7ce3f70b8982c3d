"""Ray Serve request router of the worker replicas: a session stays on the replica that holds it.

A session's window and tracker live in one replica, so every call of a session must reach it.
:class:`SessionRouter` keeps a table session id → replica: a new session goes to the replica
with the fewest sessions, and stays there for as long as that replica is in the deployment's
replica set. Only when its replica is gone (dead, or scaled down) is the session given to
another one, which then resumes it from the next window (see ``serve_replica``).

Why not Ray's ``ConsistentHashRouter`` (docs/design/ray-serve.md proposed it): its ring moves
sessions whenever the replica set changes. When a dead replica's replacement joins, it takes
over a share of every replica's keys, so sessions that never touched the dead replica would
lose their tracker too. The table moves a session only when its own replica goes away. It runs
in the caller's process (the ingress), which is why the ingress has one replica.

Calls whose routing key starts with :data:`RANK_PREFIX` go to the replica of that rank (replica
ids sorted; the rank wraps around): the ingress asks every replica for its status and metrics
that way.

The table counts a replica's sessions to place new ones, so it must lose a session when the
session ends: the ingress calls :func:`release` when it forgets one (finished, deleted, expired,
ended on its replica) and when a replica refuses to open it; a session idle for
``forget_after_s`` is dropped as a backstop. Until the sixty-first session the table learnt of
an end only from a ``finish`` or ``delete`` routed through it (dropped 30 s later) and never of
a refused open: a full replica beside an empty one got new sessions, and answered them 429.
Until the sixty-second it still dropped a session 30 s after any routed ``finish`` or
``delete``, refused ones too: a directly streamed session (``--direct-streams``) whose delete
its replica refused 409 lost its entry while it streamed on, and its next call through the
ingress went to another replica, which resumed a second copy of it.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import weakref
from collections import Counter
from typing import Any

from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter
from ray.serve.request_router import PendingRequest, ReplicaID, RunningReplica

RANK_PREFIX = "@rank:"
DEFAULT_FORGET_AFTER_S = 600.0  # a session idle this long is dropped from the table
SWEEP_EVERY_S = 30.0  # how often the table looks for idle sessions
_ROUTERS: weakref.WeakSet[SessionRouter] = weakref.WeakSet()  # this process's


def release(key: str) -> None:
    """Session ``key`` is over: every session router of this process stops counting it now."""
    for router in list(_ROUTERS):
        router.release(key)


class SessionRouter(ConsistentHashRouter):
    """Sticky session table in front of Ray's routing loop.

    It subclasses ``ConsistentHashRouter`` for that class's routing loop, which routes only the
    request it popped (the base loop may hand a replica to another session's request); the ring
    itself is not used. Kwarg: ``forget_after_s``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._table: dict[str, ReplicaID] = {}
        self._used: dict[str, float] = {}
        self._load: Counter[ReplicaID] = Counter()
        self._forget_after_s = DEFAULT_FORGET_AFTER_S
        self._swept = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None  # the one that routes
        # Ray sends this class to the ingress pickled by value (RequestRouterConfig), with a
        # copy of this module's globals; release() reads the imported module's registry.
        importlib.import_module("ttball.distributed.serve_router")._ROUTERS.add(self)

    def initialize_state(self, **kwargs: Any) -> None:
        self._forget_after_s = float(kwargs.get("forget_after_s", DEFAULT_FORGET_AFTER_S))

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        self._loop = asyncio.get_running_loop()
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        key = pending_request.metadata.session_id if pending_request is not None else ""
        if not key:
            return [candidate_replicas]  # no session: the least busy replica
        if key.startswith(RANK_PREFIX):
            ranked = sorted(candidate_replicas, key=lambda r: r.replica_id.unique_id)
            return [[ranked[int(key[len(RANK_PREFIX):]) % len(ranked)]]]
        return [[self._replica_of(key, candidate_replicas)]]

    def _replica_of(self, key: str, candidates: list[RunningReplica]) -> RunningReplica:
        now = time.monotonic()
        self._sweep(now)
        self._used[key] = now
        current = self._table.get(key)
        replica = self._replicas.get(current) if current is not None else None
        if replica is not None:
            return replica
        if current is not None:
            self._drop(current)
        replica = min(candidates, key=lambda r: (self._load[r.replica_id], r.replica_id.unique_id))
        self._table[key] = replica.replica_id
        self._load[replica.replica_id] += 1
        return replica

    def release(self, key: str) -> None:
        """Drop ``key`` from the table, on the loop that routes (Ray may route on a loop and
        thread of its own); a key never routed has nothing to drop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if loop is here:
            self._release(key)
        else:
            try:
                loop.call_soon_threadsafe(self._release, key)
            except RuntimeError:  # closed meanwhile: nothing routes any more
                pass

    def _release(self, key: str) -> None:
        replica = self._table.pop(key, None)
        self._used.pop(key, None)
        if replica is not None:
            self._drop(replica)

    def _sweep(self, now: float) -> None:
        if now - self._swept < min(SWEEP_EVERY_S, self._forget_after_s):
            return
        self._swept = now
        for key in [k for k, t in self._used.items() if now - t > self._forget_after_s]:
            self._drop(self._table.pop(key))
            del self._used[key]
        for gone in set(self._load) - set(self._replicas):
            if self._load[gone] <= 0:
                del self._load[gone]

    def _drop(self, replica_id: ReplicaID) -> None:
        self._load[replica_id] = max(0, self._load[replica_id] - 1)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        # Sessions of a replica that left keep their entry until their next call, which moves
        # them; their count no longer steers new sessions away from the live replicas.
        for gone in set(self._load) - set(self._replicas):
            self._load[gone] = 0
