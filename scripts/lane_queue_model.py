"""A queue model of the device pipeline's lanes under the load test, for predictions (no GPU).

Each session sends frames at ``fps`` from a random phase; every ``step``-th frame completes a
window. A lane takes the frames of its sessions in arrival order: when it is free it waits for
its oldest frame to have waited ``delay_ms`` (the batcher's ``--max-delay-ms``: company for a
push), then pushes every frame queued by then, for ``fixed_ms + per_frame_ms`` × frames, times a
log-normal factor of spread ``sigma`` (the GPU's and the host's variation). A window's stay is
from its last frame's arrival to the end of the push that held it -- what
``scripts/serve_push_costs.py`` reports as ``stay``. ``pooled``: the lanes take frames from one
queue (a window may run on whichever lane is free first; the worker pins a session to a lane).

    python scripts/lane_queue_model.py [--delay-ms 2 0 1] [--sigma 0.3] [--pooled]
        [--fixed-ms F --per-frame-ms P] [--flush-ms L [--flush-when short|empty|thread]]
        [--sessions 11] [--phases random|even] [--seeds N]
        [--arrival-fixed-ms A --arrival-per-frame-ms B --after-ready-ms C]

``flush_ms`` (fifty-fourth session): with overlap the batcher runs the lane's flush after every
push that leaves less than a full batch queued (``Batcher._loop``), so the lane stays occupied
after a push while the GPU finishes and the rows are read back; the frames that arrive then
queue, whatever ``delay_ms``. Without it the model predicted 1.3-1.5 frames a push and a stay
p99 3-6 ms shorter at ``--max-delay-ms 0``; measured (docs/benchmarks/h100-2026-12-06c/):
2.1-2.3 frames and a stay no shorter. With a flush of 1.5-2 ms and the decode's fixed cost a
push (``--fixed-ms 2.5 --per-frame-ms 0.95``) it gives 2.1-2.3 frames at 0 ms and the same stay
at 0 and 2 ms, as measured; the flush's time itself is first measured by the worker's ``idle``
stage (call21.sh).

Fifty-sixth session: ``--phases even`` starts the sessions as ``ttball loadtest`` does (evenly
over ``step`` frame intervals) instead of at random; ``--seeds N`` averages N draws. With the
hand-offs in the lane's time (a batch as the event loop sees it: ``--fixed-ms 2.95``, the
push's 2.5 ms fixed cost and 0.45 of hand-offs; ``--per-frame-ms 1.02``, the push's slope
between replicas of one load; ``--flush-ms 0.93``, the flush as the loop sees it) and
``--sigma 0.3`` it gives an 11-session replica 2.13-2.28 frames a push, 8-19 % waits, stay mean
10.0, p99 19.1-19.5 ms (even / random phases), measured 2.23, 19-27 %, 9.75 and 20.5
(docs/benchmarks/h100-2026-12-06e/). ``client_*``: a frame's latency as the load test's
client sees it, less the transport (its window's stay plus its wait for the window's last
frame): 26.2 / 46.5 / 50.3 ms (p50 / p95 / p99) there, measured 26.9 / 46.6 / 50.1.

Fifty-seventh session: ``--arrival-*`` models ``serve --decode-on-arrival`` -- one decoder for
the replica's lanes, its batches one after another (``arrival_fixed_ms`` + ``arrival_per_frame_ms``
× frames, each batch every frame arrived by its start), a push ending no earlier than
``after_ready_ms`` past its last frame's decode (its read-back waits for it). Calibrated on
call26b's host (docs/benchmarks/h100-2026-12-06f/), decoding in the pushes: ``--fixed-ms 3.5
--per-frame-ms 1.3`` gives 2.91 frames a push, stay 13.6 ms, client p99 57.8 (measured 2.74-2.89,
13.1-14.3, 60.6-63.6). Decoding on arrival (the push's decode stage 2.2 -> 0.7 ms: ``--fixed-ms
2.6 --per-frame-ms 0.99``, ``--after-ready-ms 1.5``): an arrival batch of 0.5-2 ms + 0.1-0.5 a
frame would have gained (client p99 48.4-49.2); the measurement (4.8-5.4 frames a push, stay
23.1-26.6, p99 75.8-90.9) is met at ``--arrival-fixed-ms 3 --arrival-per-frame-ms 1`` (5.07,
23.1, 68.0), i.e. if the decoder's batches took ~3 ms + 1 ms a frame from call to decoded --
a guess until ``ttball_arrival_batch_seconds`` (new) measures them.

First calibrated by hand on docs/benchmarks/h100-2026-12-06b/ (the quiet H100, six replicas of
two lanes, 64 sessions: 2.0 frames a push, 71-74 % busy, stay mean 9.1, p95 14.4, p99 18.6 ms);
a model, not a measurement: what it says is a prediction to test.
"""

from __future__ import annotations

import argparse
import random
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Load:
    sessions: int = 11  # a replica's: 64 sessions over six replicas of two lanes ~ 10.7
    lanes: int = 2
    fps: float = 60.0
    step: int = 3
    seconds: float = 60.0
    jitter_ms: float = 0.3  # the network's and the clients' own spread of arrivals
    # "random": each session from a random phase, its windows from a random frame; "even":
    # as ``ttball loadtest`` starts them (``start_offset``: the starts of all ``total``
    # sessions spread evenly over ``step`` frame intervals, a window every ``step`` frames from
    # the first), this replica serving every ``replicas``-th (the ingress spreads them in turn)
    phases: str = "random"
    total: int = 64
    replicas: int = 6


@dataclass(frozen=True)
class Lane:
    delay_ms: float = 2.0
    per_frame_ms: float = 2.3
    fixed_ms: float = 0.0
    sigma: float = 0.0
    pooled: bool = False
    # the flush with overlap (``Batcher._run_idle``): after a push the lane reads back and
    # tracks its batches for ``flush_ms`` (the GPU's wait included) before it takes more work,
    # and the push's rows leave then. ``flush_when``: "short", the batcher's rule (after every
    # push that leaves less than a full batch queued: at this load, every push), "empty"
    # (only when no frame waits; otherwise the next push reads them back, for ``read_ms`` of its
    # own time, and they leave when it returns), or "thread" (serve --flush-thread: after every
    # push on a thread of the lane's own, one flush at a time; the lane takes its next push
    # meanwhile)
    flush_ms: float = 0.0
    flush_when: str = "short"
    read_ms: float = 0.3
    # serve --decode-on-arrival (fifty-seventh session): one decoder for the replica's lanes
    # takes every frame arrived since its last batch, one batch at a time, for
    # ``arrival_fixed_ms + arrival_per_frame_ms`` × frames; a push (whose own costs then
    # leave the decode out) cannot end before ``after_ready_ms`` past the decode of its last
    # frame (its read-back waits for it). Off while both costs are 0.
    arrival_fixed_ms: float = 0.0
    arrival_per_frame_ms: float = 0.0
    after_ready_ms: float = 0.0

    @property
    def arrival(self) -> bool:
        return bool(self.arrival_fixed_ms or self.arrival_per_frame_ms)


def arrivals(load: Load, rnd: random.Random) -> list[tuple[float, int, bool]]:
    """(time ms, session, whether the frame completes a window), in time order."""
    if load.phases not in ("random", "even"):
        raise ValueError(f"phases: 'random' or 'even', not {load.phases!r}")
    period = 1000.0 / load.fps
    out = []
    for session in range(load.sessions):
        if load.phases == "even":
            t, offset = session * load.replicas / load.total * load.step * period, 0
        else:
            t, offset = rnd.uniform(0, period), rnd.randrange(load.step)
        k = 0
        while t < load.seconds * 1000:
            out.append((t + rnd.uniform(0, load.jitter_ms), session,
                        (k + offset) % load.step == load.step - 1))
            t += period
            k += 1
    return sorted(out)


def decoded_at(frames: list[tuple[float, int, bool]], lane: Lane) -> dict[int, float]:
    """``--arrival-*``: when each frame (by its index in ``frames``, time order) is decoded by
    the replica's arrival decoder: batches one after another, each of the frames arrived by
    its start."""
    ready: dict[int, float] = {}
    free, i = 0.0, 0
    while i < len(frames):
        start = max(free, frames[i][0])
        n = next((k for k in range(i, len(frames)) if frames[k][0] > start), len(frames)) - i
        free = start + lane.arrival_fixed_ms + lane.arrival_per_frame_ms * n
        for k in range(i, i + n):
            ready[k] = free
        i += n
    return ready


def simulate(load: Load, lane: Lane, seed: int = 1) -> dict[str, float]:
    """Frames a push, the lanes' busy % (in pushes) and idle % (in flushes), the pushes that
    waited for company more than 0.5 ms (% : the worker's ``gather`` stage above its first
    bucket), and the windows' stay: mean, p95, p99 (ms)."""
    if lane.flush_when not in ("short", "empty", "thread"):
        raise ValueError(f"flush_when: 'short', 'empty' or 'thread', not {lane.flush_when!r}")
    rnd = random.Random(seed)
    frames = arrivals(load, rnd)
    ready = decoded_at(frames, lane) if lane.arrival else {}
    ready_of = {id(frame): ready[k] for k, frame in enumerate(frames)} if ready else {}
    queues: list[list[tuple[float, int, bool]]] = [[] for _ in range(load.lanes)]
    free_at = [0.0] * load.lanes
    unread: list[list[float]] = [[] for _ in range(load.lanes)]  # windows awaiting read-back
    flusher_free = [0.0] * load.lanes  # "thread": when each lane's flush thread is free
    busy = idle = 0.0
    pushes: list[int] = []
    waits: list[float] = []
    stays: list[float] = []

    queued = 0  # frames[:queued] have arrived (are in a queue or were pushed)

    def arrives_by(i: int, queue: list[tuple[float, int, bool]], t: float) -> bool:
        """Whether a frame waits for lane ``i`` at ``t`` (queued, or arriving by then)."""
        if queue and queue[0][0] <= t:
            return True
        for frame in frames[queued:]:
            if frame[0] > t:
                return False
            if lane.pooled or frame[1] % load.lanes == i:
                return True
        return False

    def push_until(now: float) -> None:
        nonlocal busy, idle
        started = True
        while started:
            started = False
            for i in range(load.lanes):
                queue = queues[0] if lane.pooled else queues[i]
                if lane.pooled:
                    i = min(range(load.lanes), key=free_at.__getitem__)
                if not queue:
                    continue
                start = max(free_at[i], queue[0][0] + lane.delay_ms)
                if start > now:
                    continue
                waits.append(start - max(free_at[i], queue[0][0]))  # for company
                n = next((k for k, f in enumerate(queue) if f[0] > start), len(queue))
                taken, queue[:n] = queue[:n], []
                spent = (lane.fixed_ms + lane.per_frame_ms * n) * rnd.lognormvariate(0, lane.sigma)
                if unread[i]:  # the last push's windows, read back by this one ("empty")
                    spent += lane.read_ms
                end = start + spent
                if ready_of:  # the read-back waits for the last frame's decode
                    end = max(end, max(ready_of[id(f)] for f in taken) + lane.after_ready_ms)
                    spent = end - start
                busy += spent
                pushes.append(n)
                stays.extend(end - t for t in unread[i])
                unread[i] = [f[0] for f in taken if f[2]]
                waiting = arrives_by(i, queue, end)
                if lane.flush_ms and lane.flush_when == "thread":
                    flush = lane.flush_ms * rnd.lognormvariate(0, lane.sigma)
                    flusher_free[i] = max(end, flusher_free[i]) + flush
                    idle += flush
                    stays.extend(flusher_free[i] - t for t in unread[i])
                    unread[i] = []
                elif lane.flush_ms and not (lane.flush_when == "empty" and waiting):
                    flush = lane.flush_ms * rnd.lognormvariate(0, lane.sigma)
                    end += flush
                    idle += flush
                    stays.extend(end - t for t in unread[i])
                    unread[i] = []
                elif not lane.flush_ms:  # no overlap: the rows leave with their push
                    stays.extend(end - t for t in unread[i])
                    unread[i] = []
                free_at[i] = end
                started = True

    for frame in frames:
        push_until(frame[0])
        queues[0 if lane.pooled else frame[1] % load.lanes].append(frame)
        queued += 1
    push_until(float("inf"))
    for i, left in enumerate(unread):  # the last pushes' windows: a flush at the end
        stays.extend(free_at[i] + lane.flush_ms - t for t in left)
    stays.sort()
    # a frame's latency as the load test's client sees it, less the transport: its window's
    # stay plus the wait for the window's last frame (0, 1, ... step - 1 frame intervals)
    period = 1000.0 / load.fps
    client = sorted(stay + k * period for stay in stays for k in range(load.step))

    def q(values: list[float], p: float) -> float:
        return round(values[int(p * (len(values) - 1))], 1)

    lane_ms = load.lanes * load.seconds * 1000
    return {"frames_a_push": round(statistics.mean(pushes), 2),
            "busy_pct": round(100 * busy / lane_ms, 1), "idle_pct": round(100 * idle / lane_ms, 1),
            "waited_pct": round(100 * sum(w > 0.5 for w in waits) / len(waits), 1),
            "stay_mean": round(statistics.mean(stays), 1), "stay_p95": q(stays, 0.95),
            "stay_p99": q(stays, 0.99), "client_p50": q(client, 0.5),
            "client_p95": q(client, 0.95), "client_p99": q(client, 0.99)}


def averaged(load: Load, lane: Lane, seeds: int) -> dict[str, float]:
    """:func:`simulate`'s figures, the mean over seeds 1..``seeds`` (the spread's and the
    random phases' draws)."""
    runs = [simulate(load, lane, seed) for seed in range(1, seeds + 1)]
    return {key: round(statistics.mean(run[key] for run in runs), 2) for key in runs[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delay-ms", type=float, nargs="+", default=[2.0, 1.0, 0.0])
    p.add_argument("--sigma", type=float, default=0.3)
    p.add_argument("--per-frame-ms", type=float, default=2.3)
    p.add_argument("--fixed-ms", type=float, default=0.0)
    p.add_argument("--pooled", action="store_true")
    p.add_argument("--flush-ms", type=float, default=0.0)
    p.add_argument("--flush-when", choices=("short", "empty", "thread"), default="short")
    p.add_argument("--read-ms", type=float, default=0.3)
    p.add_argument("--sessions", type=int, default=Load.sessions,
                   help="a replica's sessions (its two lanes take them in turn)")
    p.add_argument("--phases", choices=("random", "even"), default="random")
    p.add_argument("--seeds", type=int, default=1, help="the mean over this many seeds")
    p.add_argument("--arrival-fixed-ms", type=float, default=0.0,
                   help="serve --decode-on-arrival: a decode batch's fixed time")
    p.add_argument("--arrival-per-frame-ms", type=float, default=0.0,
                   help="... and its time a frame")
    p.add_argument("--after-ready-ms", type=float, default=0.0,
                   help="a push's time after its last frame is decoded")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error("--seeds: at least 1")
    load = Load(sessions=args.sessions, phases=args.phases)
    for delay in args.delay_ms:
        lane = Lane(delay, args.per_frame_ms, args.fixed_ms, args.sigma, args.pooled,
                    args.flush_ms, args.flush_when, args.read_ms, args.arrival_fixed_ms,
                    args.arrival_per_frame_ms, args.after_ready_ms)
        print(f"delay {delay} ms: {averaged(load, lane, args.seeds)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
