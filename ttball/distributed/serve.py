"""``ttball serve --ray``: the worker as a Ray Serve application (docs/ray.md).

Two deployments:

- ``TTBallWorker`` (:mod:`.serve_replica`): N replicas, each the single worker's engine on one
  GPU (or ``cpus_per_replica`` CPU slots), warm before Serve routes to it. Routed by session
  (:mod:`.serve_router`).
- ``TTBallIngress`` (:mod:`.serve_ingress`): one replica, the same HTTP API as ``ttball serve``.

:func:`build_app` returns the bound application (for ``serve.run``); :func:`app_builder` is the
same for a Serve config file or a KubeRay RayService (``import_path``);
:func:`run_serve` connects to a cluster or starts a local one, runs it until SIGTERM/SIGINT.
Ray is imported only here and in the modules above, never by ``import ttball.distributed``.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ttball.distributed.serve_uploads import UPLOAD_CHUNK_BYTES
from ttball.errors import UserError
from ttball.serve.settings import MPS_PERCENT_ENV, ServeSettings

APP_NAME = "ttball"
ROUTER = "ttball.distributed.serve_router.SessionRouter"
# Calls one ingress may have open: every HTTP request and every WebSocket is one.
INGRESS_MAX_ONGOING = 10_000


@dataclass(frozen=True)
class RayServeSettings:
    """How many replicas, what each holds, and which cluster (``address=None``: a local one)."""

    worker: ServeSettings
    replicas: int = 1
    autoscale: tuple[int, int] | None = None  # (min, max) replicas; overrides ``replicas``
    gpus_per_replica: float = 0.0
    cpus_per_replica: float = 1.0
    address: str | None = None
    num_cpus: int | None = None  # CPUs of a local cluster (None: all)
    # under CUDA MPS: each replica on at most this % of its GPU's multiprocessors (None: all)
    mps_sm_percent: int | None = None
    app_name: str = APP_NAME
    # /v1/track: the ingress sends a video on to its replica in calls of at most this many bytes
    upload_chunk_bytes: int = UPLOAD_CHUNK_BYTES
    # --graceful-timeout: on shutdown each replica (ingress and workers) waits this long for its
    # requests in flight (Ray Serve's graceful_shutdown_timeout_s; its own default is 20 s)
    graceful_timeout_s: float = 30.0

    @property
    def max_replicas(self) -> int:
        return self.autoscale[1] if self.autoscale else self.replicas

    @property
    def max_ongoing(self) -> int:
        """Calls one replica may hold: a call per WebSocket frame in flight, per session."""
        w = self.worker
        return w.max_sessions * w.max_ws_inflight + w.max_queue

    def validate(self) -> None:
        self.worker.validate()
        if self.autoscale is not None:
            low, high = self.autoscale
            if not 1 <= low <= high:
                raise UserError(f"--autoscale MIN:MAX needs 1 <= MIN <= MAX, got {low}:{high} "
                                "(a replica warms up before it serves, so keep one running)")
        elif self.replicas < 1:
            raise UserError(f"--replicas must be at least 1, got {self.replicas}")
        if self.gpus_per_replica < 0 or self.cpus_per_replica < 0:
            raise UserError("--gpus-per-replica and --cpus-per-replica must be >= 0")
        if self.worker.device == "cuda" and self.gpus_per_replica <= 0:
            raise UserError("--device cuda needs --gpus-per-replica > 0, or Ray hides the GPUs")
        if not 0 <= self.graceful_timeout_s < math.inf:
            raise UserError(f"--graceful-timeout must be a number of seconds >= 0, got "
                            f"{self.graceful_timeout_s}")
        if self.upload_chunk_bytes < 1:
            raise UserError(f"upload_chunk_bytes must be at least 1, got {self.upload_chunk_bytes}")
        if self.mps_sm_percent is not None and not 1 <= self.mps_sm_percent <= 100:
            raise UserError(f"--mps-sm-percent must be 1-100, got {self.mps_sm_percent}")

    def actor_options(self) -> dict[str, Any]:
        """A replica's Ray actor options: its CPU and GPU slots, and with ``mps_sm_percent`` the
        CUDA MPS client's cap, set in its environment before it creates its CUDA context."""
        options: dict[str, Any] = {"num_cpus": self.cpus_per_replica,
                                   "num_gpus": self.gpus_per_replica}
        if self.mps_sm_percent is not None:
            env = {MPS_PERCENT_ENV: str(self.mps_sm_percent)}
            options["runtime_env"] = {"env_vars": env}
        return options

    def scaling(self) -> dict[str, Any]:
        if self.autoscale is None:
            return {"num_replicas": self.replicas}
        low, high = self.autoscale
        # A replica's calls in flight ≈ frames waiting for their window: one full batch of them
        # keeps its batcher busy; more means the sessions wait for the network.
        return {"autoscaling_config": {"min_replicas": low, "max_replicas": high,
                                       "target_ongoing_requests": self.worker.batch_limit * 3}}


def build_app(settings: RayServeSettings) -> Any:
    """The Serve application: the ingress bound to the worker deployment."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from ttball.distributed.serve_ingress import Ingress
    from ttball.distributed.serve_replica import ReplicaWorker

    settings.validate()
    router = RequestRouterConfig(
        request_router_class=ROUTER,  # type: ignore[arg-type]  # Ray takes an import path
        request_router_kwargs={"forget_after_s": 2 * settings.worker.session_ttl_s})
    worker = serve.deployment(
        ReplicaWorker, name="TTBallWorker", max_ongoing_requests=settings.max_ongoing,
        ray_actor_options=settings.actor_options(),
        request_router_config=router, health_check_period_s=5,
        graceful_shutdown_timeout_s=settings.graceful_timeout_s, **settings.scaling())
    ingress = serve.deployment(
        serve.ingress()(Ingress), name="TTBallIngress", num_replicas=1,
        max_ongoing_requests=INGRESS_MAX_ONGOING, ray_actor_options={"num_cpus": 0},
        graceful_shutdown_timeout_s=settings.graceful_timeout_s)
    # serve.deployment's stubs lose the Deployment type of its result, hence the two ignores
    replicas = worker.bind(settings.worker)  # type: ignore[attr-defined]
    return ingress.bind(replicas, settings.worker, settings.max_replicas,  # type: ignore[attr-defined]
                        settings.upload_chunk_bytes)


def start(settings: RayServeSettings, connected: Callable[[], None] | None = None) -> bool:
    """Connect (or start a local cluster), start Serve's HTTP proxy on the worker's host and
    port, deploy and wait until every replica is warm. True if a local cluster was started.
    ``connected`` runs right after connecting (``ttball serve --ray`` takes SIGTERM back there
    from ``ray.init``'s handler); an exception from then on deletes the app and stops Ray."""
    from ray import serve

    from ttball.distributed.archive import _connect

    app = build_app(settings)
    started = _connect(settings.address, settings.num_cpus)
    try:
        if connected is not None:
            connected()
        serve.start(http_options={"host": settings.worker.host, "port": settings.worker.port})
        serve.run(app, name=settings.app_name, route_prefix="/", blocking=False)
    except BaseException:
        stop(settings, started)
        raise
    return started


def stop(settings: RayServeSettings, started: bool) -> None:
    """Delete the application; shut Serve and Ray down if ``start`` started the cluster."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        return
    try:
        serve.delete(settings.app_name)
    finally:
        if started:
            serve.shutdown()
            ray.shutdown()


def settings_from(args: Any) -> RayServeSettings:
    """The CLI's namespace → settings (``ttball.cli.serve`` adds the --ray options)."""
    from ttball.cli.serve import settings_from as worker_settings

    worker = worker_settings(args)
    gpus = args.gpus_per_replica
    if gpus is None:
        gpus = 1.0 if worker.device == "cuda" or (worker.device == "auto" and _has_cuda()) else 0.0
    return RayServeSettings(worker=worker, replicas=_or(args.replicas, 1),
                            autoscale=parse_autoscale(args.autoscale),
                            gpus_per_replica=gpus, cpus_per_replica=_or(args.cpus_per_replica, 1.0),
                            address=args.address, mps_sm_percent=args.mps_sm_percent,
                            graceful_timeout_s=args.graceful_timeout)


def _or(value: Any, default: Any) -> Any:
    """An option left out (None: ``ttball serve`` tells given from not) → its default."""
    return default if value is None else value


def app_builder(args: dict[str, Any]) -> Any:
    """Application builder for Serve config files and KubeRay (``import_path:
    ttball.distributed.serve:app_builder``): ``args`` holds ``ttball serve`` options by their
    long names (``warmup_batches: "1,2,4"``, ``gpus_per_replica: 1``, ``token_file: ...``).
    Serve's own ``http_options`` decide the address; ``host``/``port`` here are not used."""
    import argparse

    from ttball.cli.serve import add_arguments

    parser = argparse.ArgumentParser(prog="ttball serve")
    add_arguments(parser)
    namespace = parser.parse_args([])
    for key, value in args.items():
        name = key.replace("-", "_")
        if not hasattr(namespace, name):
            raise UserError(f"unknown ttball serve option {key!r} in the application's args")
        setattr(namespace, name, value)
    if namespace.replicas is not None and namespace.autoscale is not None:
        raise UserError("replicas and autoscale are exclusive in the application's args "
                        "(autoscale MIN:MAX sets the replicas)")
    return build_app(settings_from(namespace))


def parse_autoscale(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        low, high = (int(x) for x in text.split(":"))
    except ValueError:
        raise UserError(f"--autoscale wants MIN:MAX replicas, e.g. 1:4, got {text!r}") from None
    return low, high


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def run_serve(args: Any) -> int:
    """``ttball serve --ray``: deploy, print the URL, serve until SIGTERM or Ctrl-C."""
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as exc:
        raise UserError(f"--ray needs Ray Serve (pip install 'ray[serve]==2.60.0'): {exc}") from None
    settings = settings_from(args)
    settings.validate()
    if settings.address is None:  # a private cluster's HTTP proxy listens here: fail now if it can't
        from ttball.serve.app import listen_socket

        listen_socket(settings.worker.host, settings.worker.port).close()
    t0 = time.monotonic()
    previous: dict[int, Any] = {}

    def take_signals() -> None:
        """After ray.init, whose own SIGTERM handler aborts the process: a signal during the
        deployment stops it cleanly (start() deletes the app and stops Ray), exit 0."""
        for s in (signal.SIGTERM, signal.SIGINT):
            previous.setdefault(s, signal.signal(s, _stop_starting))

    try:
        started = start(settings, take_signals)
    except _Stopped:
        _restore(previous)
        print("ttball serve --ray: stopped during start-up", flush=True)
        return 0
    done = threading.Event()
    for s in previous:
        signal.signal(s, lambda *_: done.set())
    try:
        w = settings.worker
        scale = (f"autoscaling {settings.autoscale[0]}..{settings.autoscale[1]}" if settings.autoscale
                 else f"{settings.replicas}")
        print(f"ttball serve --ray: ready after {time.monotonic() - t0:.1f} s at "
              f"http://{w.host}:{w.port} ({scale} replica(s) of {w.backend}, "
              f"{settings.gpus_per_replica:g} GPU and {settings.cpus_per_replica:g} CPU each)",
              flush=True)
        done.wait()
    finally:
        _restore(previous)
        stop(settings, started)
    return 0


class _Stopped(BaseException):
    """SIGTERM or Ctrl-C while ``ttball serve --ray`` deploys (a BaseException, so no
    ``except Exception`` on the way swallows it)."""


def _stop_starting(signum: int, frame: Any) -> None:
    raise _Stopped


def _restore(previous: dict[int, Any]) -> None:
    for s, handler in previous.items():
        signal.signal(s, handler)
