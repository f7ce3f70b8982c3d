"""The worker's side outside batching (ttball.serve.worker): its threads, /readyz's GPU share,
the process's switch interval."""

from __future__ import annotations

import threading

import pytest
import torch

from ttball.serve.metrics import Metrics
from ttball.serve.settings import ServeSettings
from ttball.serve.worker import Worker


@pytest.mark.parametrize("torch_threads", [None, 2])
def test_worker_threads_use_one_torch_thread_except_a_cpu_backend(torch_threads) -> None:
    """Decode threads run torch with one thread (a full team per small op starved the H200
    worker); the backend thread keeps the given count, or torch's default for a CPU backend."""
    default = torch.get_num_threads()
    worker = Worker(ServeSettings(device="cpu", torch_threads=torch_threads), Metrics())
    try:
        assert worker.pool.submit(torch.get_num_threads).result() == 1
        assert worker.backend_thread.submit(torch.get_num_threads).result() == (torch_threads or default)
    finally:
        worker.pool.shutdown()
        worker.backend_thread.shutdown()
    assert torch.get_num_threads() == default  # the caller's thread is left alone


def test_gpu_share_reports_the_mps_cap_and_never_starts_cuda(monkeypatch) -> None:
    """/readyz's ``gpu``: nothing on a CPU backend without a cap; the cap from the environment
    (what ``serve --ray --mps-sm-percent`` sets in a replica) even where no CUDA context exists
    to report multiprocessors; CUDA is not initialized by asking."""
    from ttball.serve.settings import MPS_PERCENT_ENV
    from ttball.serve.worker import gpu_share

    monkeypatch.delenv(MPS_PERCENT_ENV, raising=False)
    assert gpu_share(None) is None and gpu_share("cpu") is None
    monkeypatch.setenv(MPS_PERCENT_ENV, "50")
    assert gpu_share(torch.device("cpu")) == {"multiprocessors": None,
                                             "mps_active_thread_percentage": 50,
                                             "sched": None, "sched_note": None}
    if not torch.cuda.is_initialized():
        assert gpu_share("cuda:0")["multiprocessors"] is None
        assert not torch.cuda.is_initialized()


def test_readiness_asks_cuda_for_the_gpu_share_until_ready_then_keeps_it(monkeypatch) -> None:
    """/readyz is polled: once the worker is ready its ``gpu`` is the one answer kept, not a
    driver query on each poll; before, each call asks again (the device may not be held yet)."""
    from ttball.serve import worker as worker_module

    calls = []

    def fake_share(device, sched_note=None):
        calls.append(device)
        return {"multiprocessors": len(calls), "mps_active_thread_percentage": None,
                "sched": "auto", "sched_note": sched_note}

    monkeypatch.setattr(worker_module, "gpu_share", fake_share)
    worker = worker_module.Worker(ServeSettings(device="cpu"), Metrics())
    try:
        assert worker.readiness()["gpu"]["multiprocessors"] == 1
        assert worker.readiness()["gpu"]["multiprocessors"] == 2  # not ready: asked again
        worker.phase = "ready"
        assert worker.readiness()["gpu"]["multiprocessors"] == 3
        assert worker.readiness()["gpu"]["multiprocessors"] == 3 and len(calls) == 3
    finally:
        worker.pool.shutdown()
        worker.backend_thread.shutdown()


def test_worker_threads_carry_their_names_to_the_kernel() -> None:
    """The decode pool's and the backend's threads are named in /proc (what per-thread CPU
    tools show), ``tt-`` and the Python name, cut to the kernel's 15 bytes."""
    import sys
    from pathlib import Path

    if not sys.platform.startswith("linux"):
        pytest.skip("thread names in /proc are Linux's")
    worker = Worker(ServeSettings(device="cpu", decode_threads=2), Metrics())

    def comm() -> str:
        return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()

    try:
        assert worker.backend_thread.submit(comm).result() == "tt-backend_0"
        assert worker.pool.submit(comm).result().startswith("tt-decode_")
    finally:
        worker.pool.shutdown()
        worker.backend_thread.shutdown()


def test_the_switch_interval_is_set_for_the_process_and_shown_in_readyz() -> None:
    """--switch-interval-ms: Python's switch interval from the worker's start on (the whole
    process: the event loop and the lanes share one interpreter lock); /readyz shows it."""
    import sys

    from ttball.errors import UserError

    before = sys.getswitchinterval()
    try:
        worker = Worker(ServeSettings(device="cpu", switch_interval_ms=0.5), Metrics())
        try:
            assert sys.getswitchinterval() == pytest.approx(0.0005)
            assert worker.readiness()["switch_interval_ms"] == 0.5
        finally:
            worker.pool.shutdown()
            worker.backend_thread.shutdown()
        sys.setswitchinterval(before)
        unset = Worker(ServeSettings(device="cpu"), Metrics())  # None: Python's own, untouched
        unset.pool.shutdown()
        unset.backend_thread.shutdown()
        assert sys.getswitchinterval() == before
    finally:
        sys.setswitchinterval(before)
    for bad in (0.0, -1.0, 250.0):
        with pytest.raises(UserError, match="--switch-interval-ms must be between"):
            ServeSettings(switch_interval_ms=bad).validate()


def _pipeline_worker(small_weights) -> Worker:
    return Worker(ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1,),
                                torch_threads=1, device_pipeline=True,
                                pipeline_decode_processes=1), Metrics())


def _shut(worker: Worker) -> None:
    if worker.device is not None:
        worker.device.paths[0].pipeline.decoder.close()
    worker.pool.shutdown()
    worker.backend_thread.shutdown()


def test_decode_children_start_before_the_warm_up_and_are_waited_for_after_it(
        small_weights, monkeypatch) -> None:
    """--decode-processes: lane 0's children start right after the build and are waited for
    in the pipeline phase, after the network's warm-up (their start and the warm-up run side by
    side); /readyz shows their slowest start, split."""
    from ttball.kernels import decode_process

    events: list[str] = []
    launch, wait = decode_process._Child._launch, decode_process._Child.wait_ready
    warm = Worker._warm
    monkeypatch.setattr(decode_process._Child, "_launch",
                        lambda child: (events.append("launch"), launch(child))[1])
    monkeypatch.setattr(decode_process._Child, "wait_ready",
                        lambda child: (events.append("wait"), wait(child))[1])
    monkeypatch.setattr(Worker, "_warm", lambda self: (events.append("warm"), warm(self))[1])
    worker = _pipeline_worker(small_weights)
    try:
        worker._load_and_warm()
        assert events == ["launch", "warm", "wait"]
        assert {"warmup", "pipeline", "pipeline_warmup"} <= set(worker.seconds)
        start = worker.device.paths[0].describe()["decoder_start"]
        assert set(start) == {"spawn", "decoder", "ready"}
        assert 0 <= start["spawn"] <= start["ready"] and 0 <= start["decoder"] <= start["ready"]
    finally:
        _shut(worker)


def test_a_failed_warm_up_stops_the_decode_children_it_started(small_weights, monkeypatch) -> None:
    from ttball.kernels.decode_process import DecoderProcess

    started: list[DecoderProcess] = []
    init = DecoderProcess.__init__

    def remember(self, *args, **kwargs):
        init(self, *args, **kwargs)
        started.append(self)

    def broken(self) -> None:
        raise RuntimeError("warm-up broke")

    monkeypatch.setattr(DecoderProcess, "__init__", remember)
    monkeypatch.setattr(Worker, "_warm", broken)
    worker = _pipeline_worker(small_weights)
    try:
        with pytest.raises(RuntimeError, match="warm-up broke"):
            worker._load_and_warm()
        assert len(started) == 1 and started[0].kind == ""  # never waited for
        for child in started[0]._children:
            child.proc.join(timeout=10)
            assert not child.proc.is_alive()
    finally:
        _shut(worker)


def test_the_first_cuda_pipeline_warm_up_on_a_machine_runs_alone(tmp_path, monkeypatch) -> None:
    """On CUDA the first worker to warm its pipeline (compiling into the machine's shared
    caches) runs alone, later ones beside each other; the marker sits beside inductor's cache
    and is keyed by what the compiles depend on (another set of warm-up sizes is first again).
    Nothing of the kind on a CPU backend."""
    from types import SimpleNamespace

    from ttball.model.config import WeightsConfig
    from ttball.serve import worker as worker_module

    monkeypatch.setattr(worker_module, "_inductor_cache", lambda: tmp_path)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")

    def firsts(sizes: tuple[int, ...], device: str) -> list[bool]:
        worker = Worker(ServeSettings(device="cpu", warmup_batches=sizes), Metrics())
        try:
            worker.backend = SimpleNamespace(device=torch.device(device))
            worker.config = WeightsConfig()
            out = []
            for _ in range(2):
                with worker._compiling_alone() as first:
                    out.append(first)
            return out
        finally:
            worker.pool.shutdown()
            worker.backend_thread.shutdown()

    assert firsts((1, 2), "cuda:0") == [True, False]
    assert firsts((1, 2), "cuda:0") == [False, False]  # a restart: the caches are warm
    assert firsts((1, 2, 4), "cuda:0") == [True, False]
    assert len(list((tmp_path / "ttball").glob("pipeline-warm-*.lock"))) == 2
    before = sorted(tmp_path.rglob("*"))
    assert firsts((1, 2), "cpu") == [False, False] and sorted(tmp_path.rglob("*")) == before
