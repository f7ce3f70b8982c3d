"""``ttball loadtest URL``: replay clips as N concurrent real-time sessions against a worker.

Each session opens ``/v1/sessions``, connects its WebSocket and sends one JPEG every ``1/fps``
seconds (its clip, looped) for ``--duration`` seconds, then finishes. Latency is per frame:
frame sent → its row received. It includes the window's own wait, which no server can avoid:
with step 3 a window needs its third frame, with step 1 a frame's row needs the two frames
after it (see ``latency_floor_ms`` in the report). Counted: rows, refused frames (``errors``
by code, with sessions that could not open, ``open_<status>``, or whose stream ended
abnormally, ``closed_<close code>``),
``dropped`` (refused, never answered, or ``unsent``), ``late`` (row later than ``--deadline-ms``)
and sends that fell behind schedule by more than one frame interval (``behind_schedule``). A
worker slower than the offered rate holds sends back; a session stops sending one frame interval
after ``--duration`` and counts the rest as ``unsent``, so an overloaded run still ends on time
(duration + ``--drain-timeout`` + a few seconds) with its report.

Bounded: loopback URLs only unless ``--allow-remote``; at most 1024 sessions, 600 s, 1000 fps,
64 processes. ``--processes N`` deals the sessions round-robin to N client processes (started
before the common start time) and merges their logs into one report. They are spawned, so a
script that calls this command itself needs an ``if __name__ == "__main__":`` guard
(``ttball``, ``python -m ttball`` and ``python -m ttball.cli`` are safe: spawn does not re-run a
package's ``__main__``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ttball.errors import UserError

MAX_SESSIONS, MAX_DURATION_S, MAX_FPS, MAX_PROCESSES = 1024, 600.0, 1000.0, 64
VIDEO_SUFFIXES = {".mp4", ".avi", ".mov", ".mkv", ".webm"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="the worker, e.g. http://127.0.0.1:8000")
    p.add_argument("--clips", required=True,
                   help="a video, a folder of videos (or of images), or comma-separated videos")
    p.add_argument("--sessions", type=int, default=1, help="concurrent sessions")
    p.add_argument("--fps", type=float, default=30.0, help="frames per second per session")
    p.add_argument("--duration", type=float, default=10.0, metavar="S", help="seconds of sending")
    p.add_argument("--max-frames", type=int, default=300, help="frames decoded per clip")
    p.add_argument("--step", type=int, choices=(1, 3), default=3)
    p.add_argument("--deadline-ms", type=float, default=100.0,
                   help="a row later than this after its frame was sent counts as late")
    p.add_argument("--drain-timeout", type=float, default=30.0, metavar="S",
                   help="after the last frame, how long to wait for the remaining rows")
    p.add_argument("--jpeg-quality", type=int, default=90)
    p.add_argument("--processes", type=int, default=1,
                   help="client processes, sessions dealt round-robin (one process, one "
                        "event loop, has a limit of its own)")
    p.add_argument("--token", default=None, help="the worker's bearer token")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback URL")
    p.add_argument("--out", default=None, help="write the report as JSON here")
    p.add_argument("--quiet", action="store_true")


def _check(args: argparse.Namespace) -> None:
    from ttball.serve.settings import is_loopback

    url = urlparse(args.url)
    try:
        url.port  # noqa: B018  (raises for a port that is no number, or past 65535)
    except ValueError as exc:
        raise UserError(f"{args.url}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise UserError(f"{args.url}: give the worker's http:// or https:// address, e.g. "
                        "http://127.0.0.1:8000")
    host = url.hostname
    if not is_loopback(host) and not args.allow_remote:
        raise UserError(f"{args.url} is not a loopback address; pass --allow-remote to load a "
                        "remote worker (make sure it is yours)")
    if not 1 <= args.sessions <= MAX_SESSIONS:
        raise UserError(f"--sessions must be in 1..{MAX_SESSIONS}")
    if not 0 < args.duration <= MAX_DURATION_S:
        raise UserError(f"--duration must be in (0, {MAX_DURATION_S:g}] seconds")
    if not 0 < args.fps <= MAX_FPS:
        raise UserError(f"--fps must be in (0, {MAX_FPS:g}]")
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise UserError(f"--processes must be in 1..{MAX_PROCESSES}")
    if args.max_frames < 3:
        raise UserError("--max-frames must be at least 3")
    if not 0 <= args.jpeg_quality <= 100:
        raise UserError(f"--jpeg-quality must be in 0..100, got {args.jpeg_quality}")
    for name, value in (("--deadline-ms", args.deadline_ms), ("--drain-timeout", args.drain_timeout)):
        if not 0 < value < math.inf:  # (NaN fails it too)
            raise UserError(f"{name} must be a number > 0, got {value}")


def _why_not_ready(reply: Any) -> str:
    """One line for a /readyz that is not 200: the worker's own error or phase when it is a
    ttball worker, else the status (an HTML page is many lines and says nothing useful)."""
    try:
        body = reply.json()
    except ValueError:
        return f"HTTP {reply.status_code} (not a ttball worker?)"
    if isinstance(body, dict):
        detail = body.get("error") or body.get("phase")
        if isinstance(detail, dict):
            detail = detail.get("message")
        if detail:
            return f"HTTP {reply.status_code}: {' '.join(str(detail).split())[:200]}"
    return f"HTTP {reply.status_code}"


def load_clips(spec: str, max_frames: int, quality: int) -> list[list[bytes]]:
    """Each clip's first ``max_frames`` frames as JPEG bytes."""
    import cv2

    from ttball.frames import IMAGE_SUFFIXES, FrameSource

    paths: list[Path] = []
    for part in spec.split(","):
        path = Path(part.strip())
        if path.is_dir() and not any(p.suffix.lower() in IMAGE_SUFFIXES for p in path.iterdir()):
            paths.extend(sorted(p for p in path.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES))
        else:
            paths.append(path)
    clips = []
    for path in paths:
        frames = []
        for frame in FrameSource(path):
            bgr = cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR)
            frames.append(cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes())
            if len(frames) >= max_frames:
                break
        if len(frames) < 3:
            raise UserError(f"{path}: fewer than 3 readable frames")
        clips.append(frames)
    if not clips:
        raise UserError(f"no clips found in {spec}")
    return clips


@dataclass
class SessionLog:
    sent: dict[int, float] = field(default_factory=dict)
    latency_s: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    behind_schedule: int = 0
    unanswered: int = 0
    frames_sent: int = 0
    unsent: int = 0  # scheduled, but the send window had closed (the worker fell behind)
    first_send: float | None = None  # wall clock (comparable across client processes)
    last_row: float | None = None


async def _session(url: str, token: str | None, clip: list[bytes], args: argparse.Namespace,
                   start_at: float) -> SessionLog:
    import httpx
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    from ttball.client import stream_url

    log = SessionLog()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        r = await http.post("/v1/sessions", json={"step": args.step, "fps": args.fps})
        if r.status_code != 201:
            log.errors[f"open_{r.status_code}"] = 1
            return log
        ws_url = stream_url(url, r.json())
    # compression=None: zlib over JPEG bytes gains nothing, and with it this one-process client
    # spent 92 % of its time in permessage-deflate and topped out near 130 frames/s (1280x720).
    # ping_interval=None: a worker at its in-flight limit stops reading the socket, so a ping
    # of ours waits behind the frames queued there and its timeout (20 s) closed a live stream;
    # the run has its own deadlines (--duration, --drain-timeout).
    try:
        async with connect(ws_url, additional_headers=headers or None, max_size=None,
                           close_timeout=2, compression=None, ping_interval=None) as ws:
            receiver = asyncio.create_task(_receive(ws, log))
            if await _send(ws, clip, args, start_at, log):
                with contextlib.suppress(ConnectionClosed):  # the receiver records why
                    await ws.send(json.dumps({"type": "finish"}))
            try:
                await asyncio.wait_for(receiver, timeout=args.drain_timeout)
            except TimeoutError:
                receiver.cancel()
    except InvalidStatus as exc:  # the stream refused before it opened (a direct-stream
        # replica with another --token, say): counted as its session's open, the run goes on
        log.errors[f"open_{exc.response.status_code}"] = 1
    except (ConnectionClosed, OSError) as exc:  # refused or dropped: counted, the run goes on
        _count_closed(log, exc)
    log.unanswered = len(log.sent)
    return log


SESSION_ERRORS = ("open_", "closed_", "connection_error")  # error codes that are no frame's


def _count_closed(log: SessionLog, exc: BaseException) -> None:
    """Count a stream that ended abnormally under ``closed_<close code>`` (or
    ``connection_error``: it never opened)."""
    from websockets.exceptions import ConnectionClosed

    code = "connection_error"
    if isinstance(exc, ConnectionClosed):
        frame = exc.rcvd or exc.sent
        code = f"closed_{frame.code if frame is not None else 1006}"
    log.errors[code] = log.errors.get(code, 0) + 1


async def _send(ws: Any, clip: list[bytes], args: argparse.Namespace, start_at: float,
                log: SessionLog) -> bool:
    """Send the clip's frames on schedule; False if the stream closed under them."""
    from websockets.exceptions import ConnectionClosed

    interval = 1.0 / args.fps
    total = int(args.duration * args.fps)
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    t0 = time.perf_counter()
    # Sending stops one interval after the duration: a worker that reads slower than the clip's
    # rate holds the sends back (WebSocket back-pressure), and the frames still unsent then are
    # reported, not sent late, so the run ends on time with its report.
    end = t0 + args.duration + interval
    for k in range(total):
        due = t0 + k * interval
        now = time.perf_counter()
        if now < due:
            await asyncio.sleep(due - now)
        elif now - due > interval:
            log.behind_schedule += 1
        now = time.perf_counter()
        if now >= end:
            log.unsent = total - k
            return True
        log.sent[k] = now
        log.frames_sent += 1
        if log.first_send is None:
            log.first_send = time.time()
        try:
            await asyncio.wait_for(ws.send(clip[k % len(clip)]), end - now)
        except TimeoutError:  # the frame is in the socket's buffer; the rest stay unsent
            log.unsent = total - k - 1
            return True
        except ConnectionClosed:  # the receiver records why; this frame goes unanswered
            log.unsent = total - k - 1
            return False
    return True


async def _receive(ws: Any, log: SessionLog) -> None:
    from websockets.exceptions import ConnectionClosed

    try:
        await _read(ws, log)
    except ConnectionClosed as exc:  # not `end`: the worker (or the network) ended the stream
        _count_closed(log, exc)


async def _read(ws: Any, log: SessionLog) -> None:
    async for message in ws:
        now = time.perf_counter()
        body = json.loads(message)
        kind = body.get("type")
        if kind == "result":
            sent = log.sent.pop(body["frame"], None)
            if sent is not None:
                log.latency_s.append(now - sent)
                log.last_row = time.time()
        elif kind == "error":
            code = body.get("error", {}).get("code", "error")
            log.errors[code] = log.errors.get(code, 0) + 1
            if body.get("frame") is not None:
                log.sent.pop(body["frame"], None)
        elif kind == "end":
            return


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def summarize(logs: list[SessionLog], args: argparse.Namespace, elapsed: float) -> dict[str, Any]:
    """The report. ``achieved_fps`` is rows per second over the active span (first frame sent →
    last row received, over all sessions), not over ``elapsed_s``, which also holds opening
    and closing the sessions."""
    latencies = [x for log in logs for x in log.latency_s]
    firsts = [log.first_send for log in logs if log.first_send is not None]
    lasts = [log.last_row for log in logs if log.last_row is not None]
    span = max(lasts) - min(firsts) if firsts and lasts else 0.0
    errors: dict[str, int] = {}
    for log in logs:
        for code, n in log.errors.items():
            errors[code] = errors.get(code, 0) + n
    sent = sum(log.frames_sent for log in logs)
    unsent = sum(log.unsent for log in logs)
    # frames refused one by one; a session's errors (not opened, its stream closed) are not
    # frames: its frames then count as never answered or unsent
    refused = sum(n for code, n in errors.items() if not code.startswith(SESSION_ERRORS))
    ms = [x * 1000 for x in latencies]
    floor = [2, 1, 0] if args.step == 3 else [2]  # frames each position waits for
    return {
        "url": args.url, "sessions": args.sessions, "fps_per_session": args.fps,
        "duration_s": args.duration, "step": args.step, "elapsed_s": round(elapsed, 2),
        "frames_sent": sent, "rows": len(latencies),
        "achieved_fps": round(len(latencies) / span, 2) if span else 0.0,
        "active_s": round(span, 2),
        "offered_fps": round(args.fps * args.sessions, 2),
        "latency_ms": {"p50": round(percentile(ms, 50), 2), "p95": round(percentile(ms, 95), 2),
                       "p99": round(percentile(ms, 99), 2),
                       "max": round(max(ms), 2) if ms else float("nan"),
                       "mean": round(sum(ms) / len(ms), 2) if ms else float("nan")},
        "latency_floor_ms": {"mean": round(1000 * sum(floor) / len(floor) / args.fps, 2),
                             "max": round(1000 * max(floor) / args.fps, 2)},
        "deadline_ms": args.deadline_ms,
        "late": sum(x * 1000 > args.deadline_ms for x in latencies),
        "dropped": refused + sum(log.unanswered for log in logs) + unsent,
        "unanswered": sum(log.unanswered for log in logs),
        "unsent": unsent,
        "behind_schedule": sum(log.behind_schedule for log in logs),
        "errors": errors,
    }


def _host_cpu_text(shares: dict[str, float | None] | None) -> str:
    """The summary line's host CPU part: busy %, and stolen % (over the run, and since the host
    booted) where the host reports it."""
    if not shares:
        return ""
    stolen = f", {shares['steal_pct']} % stolen" if shares.get("steal_pct") is not None else ""
    if shares.get("steal_boot_pct") is not None:
        stolen += f" ({shares['steal_boot_pct']} % since boot)"
    return f"; host CPU {shares['busy_pct']} % busy{stolen}"


def start_offset(index: int, sessions: int, fps: float, step: int) -> float:
    """Session ``index``'s start after the first's, in seconds: the starts spread evenly over
    ``step`` frame intervals, as independent cameras' would be. Over one interval, every
    session's window (``step`` frames) would complete within the same interval, and the worker
    would see the windows in bursts, one every ``step`` intervals."""
    return (index / sessions) * step / fps


async def _run_sessions(args: argparse.Namespace, clips: list[list[bytes]], indices: range,
                        start_wall: float) -> list[SessionLog]:
    """Sessions ``indices`` of ``args.sessions``, their starts staggered (:func:`start_offset`)
    from the wall-clock time ``start_wall``."""
    start_at = time.perf_counter() + (start_wall - time.time())
    tasks = [_session(args.url.rstrip("/"), args.token, clips[i % len(clips)], args,
                      start_at + start_offset(i, args.sessions, args.fps, args.step))
             for i in indices]
    return list(await asyncio.wait_for(asyncio.gather(*tasks),
                                       timeout=args.duration + args.drain_timeout + 60))


def _process_share(args: argparse.Namespace, clips: list[list[bytes]], indices: range,
                   start_wall: float) -> list[SessionLog]:
    return asyncio.run(_run_sessions(args, clips, indices, start_wall))


def _run_all(args: argparse.Namespace, clips: list[list[bytes]]) -> dict[str, Any]:
    from ttball.hostcpu import cpu_shares, cpu_ticks

    n = min(args.processes, args.sessions)
    before = cpu_ticks()
    start_wall = time.time() + (0.5 if n == 1 else 3.0)  # time for the processes to start
    if n == 1:
        logs = _process_share(args, clips, range(args.sessions), start_wall)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        shares = [range(k, args.sessions, n) for k in range(n)]
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = [pool.submit(_process_share, args, clips, share, start_wall) for share in shares]
            logs = [log for part in parts for log in part.result()]
    report = summarize(logs, args, time.time() - start_wall)  # from the first session's start
    # this host's CPU over the run (the client's; the worker's too when it runs here): a tail
    # lengthened by a neighbour on the hypervisor shows as time stolen
    report["host_cpu"] = cpu_shares(before, cpu_ticks())
    return report


def run(args: argparse.Namespace) -> int:
    _check(args)
    import httpx

    if args.out:  # before the run, not found after it
        from ttball.cli import prepare_out_file

        prepare_out_file(args.out)
    clips = load_clips(args.clips, args.max_frames, args.jpeg_quality)
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        ready = httpx.get(args.url.rstrip("/") + "/readyz", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach {args.url}: {exc}") from None
    if ready.status_code != 200:
        raise UserError(f"{args.url} is not ready: {_why_not_ready(ready)}")
    try:
        report = _run_all(args, clips)
    except TimeoutError:
        raise UserError("load test did not finish in time (worker stuck?)") from None
    report["server"] = ready.json()
    if args.out:
        from ttball.results import write_json

        write_json(args.out, report)  # (latencies of no rows, NaN, are null)
    if report["rows"] == 0:  # the report says what happened; the run measured nothing
        raise UserError(f"no rows came back (errors: {report['errors'] or 'none'})"
                        + ("; a wrong or missing --token?" if any(
                            "401" in code for code in report["errors"]) else ""))
    if not args.quiet:
        lat = report["latency_ms"]
        print(f"{report['sessions']} sessions × {args.fps:g} fps for {args.duration:g} s: "
              f"{report['achieved_fps']} rows/s of {report['offered_fps']} offered; latency p50 "
              f"{lat['p50']} ms, p95 {lat['p95']} ms, p99 {lat['p99']} ms (floor mean "
              f"{report['latency_floor_ms']['mean']} ms); late {report['late']}, dropped "
              f"{report['dropped']}, behind schedule {report['behind_schedule']}"
              + (f", errors {report['errors']}" if report["errors"] else "")
              + _host_cpu_text(report["host_cpu"]))
    return 0
