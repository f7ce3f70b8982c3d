"""A :class:`~ttball.kernels.prepost_image.JpegDecoder` in a process of its own.

On the H200 every GPU JPEG decoder we have (torchvision's nvJPEG, nvImageCodec's hardware and
CUDA decoders) waits, inside its call, for all of its process's GPU work to finish: behind 20 ms
of work queued on another stream, even one spinning thread that leaves every SM free, a call
takes ~21 ms instead of ~4 (``docs/benchmarks/e2e.md``, "Twenty-ninth session"). In the worker
that undoes the overlap: a lane's decode waits for the previous push's network. Another
process's work does not hold it up (12 ms against 10, as MPS clients, beside a process keeping
the SMs 90 % busy), so :class:`DecoderProcess` decodes in a child process:

- the parent allocates ``slots`` buffers of ``slot_bytes`` on the device once per child and
  shares them with it (CUDA IPC; shared memory on the CPU, where tests run it);
- a call writes the JPEG bytes into a shared-memory inbox of ``inbox_bytes`` (one a slot)
  and sends only their lengths through a pipe (a request larger than the inbox sends the bytes
  themselves through the pipe: pickled and written 64 KiB at a time, 4-6 ms for 40 frames of
  150 KB on the H200's host, which is what the inbox saves); the child decodes them with its own
  ``JpegDecoder`` (its own CUDA context, or MPS client), copies the frames one after another
  into the slot (each run of one shape as one copy), waits for its stream and answers their
  shapes; the parent copies the frames
  out on its current stream, each run of one shape as one tensor whose rows are the frames
  (the slot is reused two calls later, after an event says those copies are done). A batch
  larger than a slot comes back in rounds;
- a frame that does not decode raises :class:`~ttball.kernels.prepost_image.DecodeError` with
  its index, as ``JpegDecoder`` does; a child found dead when a call begins is started again
  (``restarts`` counts them), and one that dies during a call makes that call raise.

With ``processes`` > 1 a call splits its frames into that many runs, one a child, decoded at
once (a push's decode then takes as long as its slowest run). Frames come back ``(3, H, W)``
contiguous, whatever layout the children's decoder produced.
``last_seconds`` splits the last call's time: ``child`` (the child's decode calls), ``fill``
(its copies into the slot and its wait for them) and ``transfer`` (the rest), which
``to_child`` (from the parent's send to the child holding the request: the bytes into the
inbox, the pipe, the child's wake-up), ``from_child`` (from the child's answer to the parent
holding it: the pipe, the parent's wake-up and its wait for the interpreter lock) and
``copy_out`` (queueing the copies out of the slot) split in turn, measured on the host's
monotonic clock, which the processes share; what ``transfer`` holds beyond them is the parent
reading one child's answer while another's waits.
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as tmp
from torch import Tensor

from ttball.cudasched import wait_event
from ttball.kernels import copies
from ttball.kernels.decode_child import serve, slot_runs
from ttball.kernels.prepost_image import DecodeError

SLOT_BYTES = 1 << 28  # 256 MiB: 97 frames of 1280x720 RGB a round
INBOX_BYTES = 1 << 25  # 32 MiB of JPEG bytes a request: ~200 broadcast frames of 150 KB
REPLY_TIMEOUT_S = 120.0  # the child's first decode initializes its library


class DecoderProcess:
    """``JpegDecoder(device, library=library)`` run in ``processes`` child processes; called
    the same way (a list of JPEG byte strings → ``(3, H, W) uint8`` tensors on ``device``).
    With several, a call splits its frames into that many runs in order, decoded at once.
    ``kind`` and ``gpu_reason`` are the children's decoder's; ``restarts`` counts children
    started again; ``last_seconds`` is the slowest child's split of the last call.
    ``wait=False``: the children are started and not waited for; :meth:`wait_ready` waits
    (before the first call; meanwhile the caller does other start-up work)."""

    def __init__(self, device: torch.device | str, library: str = "nvjpeg", processes: int = 1,
                 slot_bytes: int = SLOT_BYTES, slots: int = 2,
                 inbox_bytes: int = INBOX_BYTES, wait: bool = True) -> None:
        if slot_bytes < 1 or slots < 1 or processes < 1 or inbox_bytes < 0:
            raise ValueError("processes, slot_bytes and slots must be >= 1 and inbox_bytes "
                             f">= 0, got {processes}, {slot_bytes}, {slots}, {inbox_bytes}")
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.library = library
        self.last_seconds: dict[str, float] = {}
        self._ahead: _Request | None = None  # a prefetch not taken yet
        self.ahead_hits = self.ahead_misses = 0
        self._children: list[_Child] = []
        self.kind, self.gpu_reason = "", None
        try:  # all started, then each waited for: a child's start (spawn, import torch, open
            # CUDA and its decoder) takes seconds, more beside other replicas' children, and
            # one after another they added up in the worker's start-up
            for _ in range(processes):
                self._children.append(_Child(self.device, library, slot_bytes, slots,
                                             inbox_bytes, wait=False))
        except BaseException:
            self.close()
            raise
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until every child has started (once; a child that could not start closes them
        all and raises)."""
        if self.kind:
            return
        try:
            for child in self._children:
                if not child.kind:
                    child.wait_ready()
        except BaseException:
            self.close()
            raise
        self.kind, self.gpu_reason = self._children[0].kind, self._children[0].gpu_reason

    def start_seconds(self) -> dict[str, float]:
        """The slowest child's start, on the host's monotonic clock from its launch: ``spawn``
        until its code ran (the interpreter, ``import torch``, the CUDA buffers it shares),
        ``decoder`` its decoder's set-up, ``ready`` until its answer was read (later if the
        caller waited late). Empty before :meth:`wait_ready`."""
        starts = [child.start_s for child in self._children if child.start_s]
        return {key: round(max(s[key] for s in starts), 3) for key in starts[0]} if starts else {}

    @property
    def processes(self) -> int:
        return len(self._children)

    @property
    def restarts(self) -> int:
        return sum(child.restarts for child in self._children)

    def __call__(self, blobs: Sequence[bytes], then: Sequence[bytes] = ()) -> list[Tensor]:
        """The frames of ``blobs``. ``then``: the next call's, sent to the children before this
        call waits for its own (as :meth:`prefetch` would after it), so each child has its next
        request in hand the moment it answers this one, instead of after this call has read the
        answer and the caller has sent the next; a request of ``then`` waits in the child's pipe
        meanwhile (its ``to_child`` counts that wait)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            if _same(ahead.blobs, blobs[:len(ahead.blobs)]):
                self.ahead_hits += 1
                rest = blobs[len(ahead.blobs):]
                if not rest:  # ``then`` queued behind ``ahead`` in each child
                    return self._receive_sending_after(ahead, then)
                frames = self._receive(ahead)
                split = self.last_seconds
                try:
                    more = self._receive_sending_after(self._send(list(rest)), then)
                except DecodeError as exc:
                    raise DecodeError(len(ahead.blobs) + exc.index, exc.reason) from None
                self.last_seconds = {key: split[key] + self.last_seconds[key] for key in split}
                return frames + more
            self._drop(ahead)
        if not blobs:
            self._send_ahead(then)
            return []
        return self._receive_sending_after(self._send(list(blobs)), then)

    def _receive_sending_after(self, request: _Request, then: Sequence[bytes]) -> list[Tensor]:
        self._send_ahead(then)
        return self._receive(request)

    def _send_ahead(self, blobs: Sequence[bytes]) -> None:
        if blobs:
            self._ahead = self._send(list(blobs))

    def prefetch(self, blobs: Sequence[bytes]) -> None:
        """Start decoding ``blobs`` now, for the next call: if that call's frames begin with
        the same bytes, it takes these frames, waiting only for what is left of their decode,
        and decodes the rest afresh (a bad frame raises :class:`DecodeError` with its index in
        that call, as a fresh decode would); any other call drops them (``ahead_hits``,
        ``ahead_misses`` count both). One is held at a time: a second prefetch drops the first
        (a call's ``then`` takes its place). With a prefetch taken, ``last_seconds`` covers the
        request from when it was sent, so its parts may add up to more than the call's own
        wait."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self._drop(ahead)
        if blobs:
            self._ahead = self._send(list(blobs))

    def _send(self, blobs: list[bytes]) -> _Request:
        """Each child its run of ``blobs`` (a child that cannot take it: the request's
        failure, raised when it is received)."""
        k = min(len(self._children), len(blobs))
        request = _Request(blobs, [len(blobs) * i // k for i in range(k + 1)], [],
                           time.perf_counter())
        for child, lo, hi in zip(self._children, request.bounds, request.bounds[1:]):
            try:
                child.send(blobs[lo:hi])
            except RuntimeError as exc:
                request.failure = exc
                break
            request.busy.append(child)
        return request

    def _receive(self, request: _Request) -> list[Tensor]:
        """The frames of ``request``; every busy child's answer is read, so none is left
        mid-request, then its failure (if any) is raised."""
        failure = request.failure
        out: list[Tensor] = []
        splits: list[dict[str, float]] = []
        for child, lo in zip(request.busy, request.bounds):
            try:
                frames, split = child.receive()
                out.extend(frames)
                splits.append(split)
            except DecodeError as exc:
                failure = failure or DecodeError(lo + exc.index, exc.reason)
            except RuntimeError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        elapsed = time.perf_counter() - request.start
        slowest = max(splits, key=lambda split: split["child"] + split["fill"])
        transfer = max(0.0, elapsed - slowest["child"] - slowest["fill"])
        self.last_seconds = {**slowest, "transfer": transfer}
        return out

    def _drop(self, request: _Request) -> None:
        """A prefetch not taken (an ahead miss): its answers read and dropped (a bad frame or
        a dead child there is not this call's: the next call restarts a dead child)."""
        self.ahead_misses += 1
        try:
            self._receive(request)
        except (DecodeError, RuntimeError):
            pass

    def close(self) -> None:
        """Stop the children (also done when this object is collected, or at exit)."""
        for child in self._children:
            child.close()


@dataclass
class _Request:
    """A call's frames sent to ``busy`` children, ``blobs[bounds[i]:bounds[i + 1]]`` to the
    i-th, at ``start`` (``failure``: a child that could not take its run)."""

    blobs: list[bytes]
    bounds: list[int]
    busy: list[_Child]
    start: float
    failure: BaseException | None = None


def _same(held: list[bytes], blobs: Sequence[bytes]) -> bool:
    return len(held) == len(blobs) and all(a is b or a == b for a, b in zip(held, blobs))


class _Child:
    """One child process, its pipe, its ``slots`` shared buffers and their inboxes."""

    def __init__(self, device: torch.device, library: str, slot_bytes: int, slots: int,
                 inbox_bytes: int, wait: bool = True) -> None:
        """``wait=False``: the process is started but not waited for (:meth:`wait_ready`)."""
        self.device, self.library = device, library
        # the JPEG bytes of a request, one inbox a slot (read by the child before it answers, so
        # free again once the answer is in; a second request may be sent before the first's
        # answer: DecoderProcess's ``then``)
        self.inboxes = [torch.empty(inbox_bytes, dtype=torch.uint8).share_memory_()
                        for _ in range(slots)]
        # written through a memoryview: one memcpy a frame with the interpreter lock held. A
        # numpy slice assignment lets the lock go for each frame, and taking it back waits for
        # whichever thread holds it, up to the switch interval (5 ms) each time: 22 frames of
        # 150 KB beside a thread busy in Python 57.7 ms so, 0.10 ms through the memoryview
        # (scripts/gil_convoy.py; LOG.md, thirty-second session)
        self._inboxes = [memoryview(inbox.numpy()).cast("B") for inbox in self.inboxes]
        self.piped = 0  # requests too large for the inbox, sent through the pipe
        self.ring = [torch.empty(slot_bytes, dtype=torch.uint8, device=device)
                     for _ in range(slots)]
        if device.type == "cpu":
            for buf in self.ring:
                buf.share_memory_()
        self._copied: list[torch.cuda.Event | None] = [None] * slots
        self._next, self._slot = 0, 0  # the next slot to fill; the slot being read
        # requests sent and not yet answered, oldest first: (slot, when sent); at most ``slots``
        self._in_flight: deque[tuple[int, float]] = deque()
        self._sent = 0.0  # when the request in hand (or its last "next") was sent
        self.restarts = 0
        self.kind, self.gpu_reason = "", None
        self.start_s: dict[str, float] = {}  # its last start (DecoderProcess.start_seconds)
        self._launch()
        if wait:
            self.wait_ready()

    def _start(self) -> None:
        self._launch()
        self.wait_ready()

    def _launch(self) -> None:
        ctx = tmp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(child, str(self.device), self.library, self.ring,
                                               self.inboxes),
                           daemon=True, name="ttball-decoder")
        self._launched = time.monotonic()
        proc.start()
        child.close()
        self.proc, self.conn = proc, parent
        self._in_flight.clear()  # a dead child's requests die with it
        self._finalizer = weakref.finalize(self, _stop, proc, parent)

    def wait_ready(self) -> None:
        """Wait for the started child's first reply: its decoder's kind, or why it failed."""
        reply = self._receive()
        if reply[0] != "ready":
            self._finalizer()
            raise RuntimeError(f"the decode process could not start: {reply[1]}")
        self.kind, self.gpu_reason = reply[1], reply[2]
        entered, decoder_s = reply[3]
        self.start_s = {"spawn": entered - self._launched, "decoder": decoder_s,
                        "ready": time.monotonic() - self._launched}

    def _receive(self) -> tuple[Any, ...]:
        """The child's next reply; a child that dies or stops answering is an error."""
        if not self.conn.poll(REPLY_TIMEOUT_S):
            self.proc.kill()  # its answer, if it came now, would be taken for the next call's
            raise RuntimeError(f"the decode process did not answer in {REPLY_TIMEOUT_S:.0f} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(timeout=5)
            raise RuntimeError("the decode process exited "
                               f"(code {self.proc.exitcode})") from None

    def send(self, blobs: Sequence[bytes]) -> None:
        """Start decoding ``blobs`` into the next slot (a dead child is started again first, unless
        a request of this one is in flight: that one's :meth:`receive` reports it). At most
        ``slots`` requests may be in flight."""
        if len(self._in_flight) >= len(self.ring):
            raise RuntimeError("a decode child holds as many requests as it has slots")
        if not self._in_flight and not self.proc.is_alive():
            self._finalizer()
            self.restarts += 1
            self._start()
        slot, self._next = self._next, (self._next + 1) % len(self.ring)
        if (copied := self._copied[slot]) is not None:
            copied.synchronize()  # the copies out of its last use (long done)
        sent = time.monotonic()
        lengths = [len(b) for b in blobs]
        inbox = self._inboxes[slot]
        if sum(lengths) <= len(inbox):
            offset = 0
            for blob, n in zip(blobs, lengths):
                inbox[offset:offset + n] = blob
                offset += n
            request: tuple[Any, ...] = (slot, "inbox", lengths)
        else:
            self.piped += 1
            request = (slot, "pipe", [bytes(b) for b in blobs])
        try:
            self.conn.send(request)
        except (BrokenPipeError, OSError):
            raise RuntimeError("the decode process exited "
                               f"(code {self.proc.exitcode})") from None
        self._in_flight.append((slot, sent))

    def receive(self) -> tuple[list[Tensor], dict[str, float]]:
        """The frames of the oldest :meth:`send` not yet received, copied out of its slot, and
        the request's seconds: ``child``, ``fill``, ``to_child``, ``from_child``, ``copy_out``
        (summed over its rounds; see the module's docstring)."""
        split = dict.fromkeys(("child", "fill", "to_child", "from_child", "copy_out"), 0.0)
        out: list[Tensor] = []
        self._slot, self._sent = self._in_flight.popleft()
        while True:
            reply = self._receive()
            held = time.monotonic()
            if reply[0] == "decode":
                raise DecodeError(reply[1], reply[2])
            if reply[0] == "error":
                raise RuntimeError(f"the decode process failed: {reply[1]}")
            seconds = reply[2]
            split["child"] += seconds["child"]
            split["fill"] += seconds["fill"]
            split["to_child"] += max(0.0, seconds["got"] - self._sent)
            split["from_child"] += max(0.0, held - seconds["answered"])
            out.extend(self._copy_out(reply[1]))
            split["copy_out"] += time.monotonic() - held
            if reply[0] == "done":
                break
            self._wait_copies()  # "part": the child fills the slot again
            self._sent = time.monotonic()
            self.conn.send("next")
        self._copied[self._slot] = self._record()
        return out, split

    def _copy_out(self, shapes: Sequence[tuple[int, ...]]) -> list[Tensor]:
        """The frames out of the slot, each run of frames of one shape (a call's frames, as a
        rule) as one copy whose rows are the frames: two torch calls a run instead of one a
        frame, each of which lets the interpreter lock go and waits to take it back behind the
        process's other threads (docs/benchmarks/LOG.md, thirty-second session). A frame kept
        (a session's last) keeps its run's copy alive."""
        out: list[Tensor] = []
        for _, _, run in slot_runs(self.ring[self._slot], shapes):
            out.extend(copies.clone(run).unbind(0))
        return out

    def _record(self) -> torch.cuda.Event | None:
        if self.device.type != "cuda":
            return None
        event = wait_event(index=self.device.index or 0)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _wait_copies(self) -> None:
        event = self._record()
        if event is not None:
            event.synchronize()

    def close(self) -> None:
        self._finalizer()


def _stop(proc: Any, conn: Any) -> None:
    try:
        conn.send(None)
    except (BrokenPipeError, OSError):
        pass
    proc.join(timeout=5)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)
    conn.close()
