"""The Open Inference Protocol (KServe v2, Triton's HTTP/REST protocol) for the raw network.

One model, ``blurball`` version ``1``: input ``frames`` FP32 ``[-1, 9, H, W]`` (three RGB frames,
normalised as the weights' config says, oldest first), output ``heatmaps`` FP32 ``[-1, 3, H, W]``
(the network's logits, before the sigmoid). H and W are the weights' input size. Requests go
through the same batcher as the sessions' windows, so they never compile.

Routes: ``GET /v2`` (server metadata), ``/v2/health/live``, ``/v2/health/ready``,
``/v2/models/blurball[/versions/1]`` (metadata), ``.../ready``, ``.../config`` (Triton's model
configuration, which perf_analyzer reads), ``.../stats`` (statistics extension) and
``POST .../infer``. Errors are ``{"error": "<message>"}`` as the protocol says.

Binary tensor data extension: a request whose JSON is followed by raw tensors says how long the
JSON is in ``Inference-Header-Content-Length``; each binary input carries
``"parameters": {"binary_data_size": N}`` (little-endian, row-major). Outputs are returned
binary when an output asks ``"parameters": {"binary_data": true}`` or the request sets
``"parameters": {"binary_data_output": true}``; the response then has the same header.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ttball import __version__
from ttball.serve.sessions import clip
from ttball.serve.settings import ApiError
from ttball.serve.uploads import parse_json, read_body
from ttball.serve.worker import Worker
from ttball.stream import Window

MODEL, VERSION = "blurball", "1"
INPUT, OUTPUT = "frames", "heatmaps"
HEADER_LENGTH = "Inference-Header-Content-Length"
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics"]


class Stats:
    """Triton's per-model statistics (the subset this worker measures), durations in ns."""

    def __init__(self) -> None:
        self.inference_count = self.execution_count = 0
        self.success = [0, 0]
        self.fail = [0, 0]
        self.last_inference_ms = 0

    def record(self, rows: int, ok: bool, ns: int) -> None:
        bucket = self.success if ok else self.fail
        bucket[0] += 1
        bucket[1] += ns
        if ok:
            self.inference_count += rows
            self.execution_count += 1
        self.last_inference_ms = int(time.time() * 1000)

    def to_json(self) -> dict[str, Any]:
        def d(pair: list[int]) -> dict[str, int]:
            return {"count": pair[0], "ns": pair[1]}

        zero = d([0, 0])
        return {
            "name": MODEL, "version": VERSION, "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count, "execution_count": self.execution_count,
            "inference_stats": {"success": d(self.success), "fail": d(self.fail), "queue": zero,
                                "compute_input": zero, "compute_infer": d(self.success),
                                "compute_output": zero, "cache_hit": zero, "cache_miss": zero},
            "batch_stats": [],
        }


def router(worker: Worker) -> APIRouter:
    r = APIRouter(prefix="/v2")
    stats = Stats()

    @r.get("")
    async def server_metadata() -> dict[str, Any]:
        return {"name": "ttball", "version": __version__, "extensions": EXTENSIONS}

    @r.api_route("/health/live", methods=["GET", "HEAD"])
    async def live() -> Response:
        return Response(status_code=200)

    @r.api_route("/health/ready", methods=["GET", "HEAD"])
    async def ready() -> JSONResponse:
        return JSONResponse(worker.readiness(), 200 if worker.ready else 503)

    @r.get("/models/stats")
    async def all_stats() -> dict[str, Any]:
        return {"model_stats": [stats.to_json()]}

    @r.post("/repository/index")
    async def index() -> list[dict[str, str]]:
        state = "READY" if worker.ready else "UNAVAILABLE"
        return [{"name": MODEL, "version": VERSION, "state": state, "reason": worker.error or ""}]

    for prefix in ("/models/{model}", "/models/{model}/versions/{version}"):
        r.add_api_route(prefix, _metadata(worker), methods=["GET"])
        r.add_api_route(prefix + "/ready", _model_ready(worker), methods=["GET"])
        r.add_api_route(prefix + "/config", _config(worker), methods=["GET"])
        r.add_api_route(prefix + "/stats", _stats(stats), methods=["GET"])
        r.add_api_route(prefix + "/infer", _infer(worker, stats), methods=["POST"])
    return r


def _check_model(model: str, version: str | None) -> None:
    if model != MODEL or version not in (None, "", VERSION):
        which = f"{model!r}" + (f" version {version!r}" if version else "")
        raise ApiError(404, "unknown_model", f"unknown model {which}; this worker serves "
                       f"{MODEL!r} version {VERSION}")


def _size(worker: Worker) -> tuple[int, int]:
    if worker.config is None:
        worker.require_ready()
    assert worker.config is not None
    return worker.config.input_size


def _metadata(worker: Worker) -> Any:
    async def metadata(model: str, version: str | None = None) -> dict[str, Any]:
        _check_model(model, version)
        h, w = _size(worker)
        return {
            "name": MODEL, "versions": [VERSION], "platform": "pytorch",
            "inputs": [{"name": INPUT, "datatype": "FP32", "shape": [-1, 9, h, w]}],
            "outputs": [{"name": OUTPUT, "datatype": "FP32", "shape": [-1, 3, h, w]}],
        }
    return metadata


def _model_ready(worker: Worker) -> Any:
    async def model_ready(model: str, version: str | None = None) -> JSONResponse:
        _check_model(model, version)
        return JSONResponse({"name": MODEL, "ready": worker.ready}, 200 if worker.ready else 503)
    return model_ready


def _config(worker: Worker) -> Any:
    async def config(model: str, version: str | None = None) -> dict[str, Any]:
        _check_model(model, version)
        h, w = _size(worker)
        s = worker.settings
        gpu = str(getattr(worker.backend, "device", "cpu")).startswith("cuda")
        return {
            "name": MODEL, "platform": "pytorch", "backend": "ttball",
            "version_policy": {"latest": {"num_versions": 1}},
            "max_batch_size": s.batch_limit,
            "input": [{"name": INPUT, "data_type": "TYPE_FP32", "format": "FORMAT_NONE",
                       "dims": [9, h, w], "is_shape_tensor": False, "allow_ragged_batch": False,
                       "optional": False}],
            "output": [{"name": OUTPUT, "data_type": "TYPE_FP32", "dims": [3, h, w],
                        "label_filename": "", "is_shape_tensor": False}],
            "batch_input": [], "batch_output": [],
            "dynamic_batching": {"preferred_batch_size": sorted(s.warmup_batches),
                                 "max_queue_delay_microseconds": int(s.max_delay_ms * 1000)},
            "instance_group": [{"name": f"{MODEL}_0", "kind": "KIND_GPU" if gpu else "KIND_CPU",
                                "count": 1}],
        }
    return config


def _stats(stats: Stats) -> Any:
    async def model_stats(model: str, version: str | None = None) -> dict[str, Any]:
        _check_model(model, version)
        return {"model_stats": [stats.to_json()]}
    return model_stats


def _infer(worker: Worker, stats: Stats) -> Any:
    async def infer(model: str, request: Request, version: str | None = None) -> Response:
        _check_model(model, version)
        worker.require_ready()
        start = time.perf_counter_ns()
        body = await read_body(request, worker.settings.max_body_bytes)
        try:
            response = await _run(worker, request, body)
        except ApiError:
            stats.record(0, False, time.perf_counter_ns() - start)
            raise
        stats.record(response[1], True, time.perf_counter_ns() - start)
        return response[0]
    return infer


async def _run(worker: Worker, request: Request, body: bytes) -> tuple[Response, int]:
    header, binary = _split(request, body)
    wanted_binary = _binary_wanted(header)  # (checked before the data is read)
    x = _input(header, binary, worker)
    assert worker.batcher is not None
    worker.batcher.reserve(len(x))
    futures = [worker.batcher.submit(Window("oip", (0, 0, 0), row), raw=True) for row in x]
    try:
        out = np.stack(await asyncio.gather(*futures)).astype("<f4", copy=False)
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    tensor: dict[str, Any] = {"name": OUTPUT, "datatype": "FP32", "shape": list(out.shape)}
    reply: dict[str, Any] = {"model_name": MODEL, "model_version": VERSION, "outputs": [tensor]}
    if "id" in header:
        reply["id"] = header["id"]
    if not wanted_binary:
        if not np.isfinite(out).all():  # finite inputs far outside the frames' range can do it
            raise ApiError(400, "bad_request", "the logits overflow for this input (no JSON "
                           "number can carry them); ask for binary_data output")
        tensor["data"] = out.ravel().tolist()
        return JSONResponse(reply), len(x)
    blob = out.tobytes()
    tensor["parameters"] = {"binary_data_size": len(blob)}
    head = json.dumps(reply).encode()
    return Response(head + blob, media_type="application/octet-stream",
                    headers={HEADER_LENGTH: str(len(head))}), len(x)


def _split(request: Request, body: bytes) -> tuple[dict[str, Any], bytes]:
    length = request.headers.get(HEADER_LENGTH)
    if length is not None:
        # ASCII digits only ("²".isdigit() holds), and no longer than the body's own length
        if not (length.isascii() and length.isdigit() and len(length) <= len(str(len(body)))
                and int(length) <= len(body)):
            raise ApiError(400, "bad_request", f"{HEADER_LENGTH} {length!r} does not fit the "
                           f"{len(body)}-byte body")
        head, binary = body[:int(length)], body[int(length):]
    else:
        head, binary = body, b""
    looks_binary = b"\0" in head or not _is_utf8(head)  # tensor bytes after JSON, unsplit
    what = "the inference request" + (f" (binary data needs the {HEADER_LENGTH} header)"
                                      if length is None and looks_binary else "")
    header = parse_json(head, what, "bad_request")
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list):
        raise ApiError(400, "bad_request", "the inference request needs an 'inputs' list")
    return header, binary


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _flag(params: dict[str, Any], name: str, default: bool) -> bool:
    """Parameter ``name``, a JSON boolean (``"false"``, a string, was taken as true)."""
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise ApiError(400, "bad_request", f"parameter {name} must be true or false, got "
                       f"{clip(repr(value))}")
    return value


def _parameters(owner: dict[str, Any], where: str) -> dict[str, Any]:
    """``owner``'s ``parameters`` object (empty if absent); 400 if it is not an object."""
    params = owner.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ApiError(400, "bad_request", f"{where} parameters must be a JSON object")
    return params


def _numbers(data: Any) -> bool:
    """``data`` is a JSON number or (nested) lists of them, none ``true`` / ``false`` (exact
    types: ``bool`` is an ``int`` subclass; ~60 ms for a 288 × 512 window's 1.3 M values)."""
    if isinstance(data, list):
        if data and isinstance(data[0], list):
            return all(_numbers(item) for item in data)
        return all(type(value) in (int, float) for value in data)
    return type(data) in (int, float)


def _whole(value: Any) -> bool:
    """A JSON integer (not ``true`` / ``false``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _input(header: dict[str, Any], binary: bytes, worker: Worker) -> np.ndarray:
    """The ``frames`` tensor ``(B, 9, H, W)`` float32 from JSON data or the binary section."""
    inputs = header["inputs"]
    if len(inputs) != 1 or not isinstance(inputs[0], dict) or inputs[0].get("name") != INPUT:
        raise ApiError(400, "bad_request", f"expected exactly one input named {INPUT!r}")
    spec = inputs[0]
    h, w = _size(worker)
    shape = spec.get("shape")
    if spec.get("datatype") != "FP32":
        raise ApiError(400, "bad_request", f"input {INPUT!r} must be FP32, got {spec.get('datatype')}")
    if (not isinstance(shape, list) or len(shape) != 4 or not all(_whole(d) for d in shape)
            or shape[1:] != [9, h, w] or shape[0] < 1):
        raise ApiError(400, "bad_request", f"input {INPUT!r} must have shape [B, 9, {h}, {w}], "
                       f"got {shape}")
    limit = worker.settings.batch_limit
    if shape[0] > limit:
        raise ApiError(400, "bad_request",
                       f"inference request batch-size must be <= {limit} for '{MODEL}'")
    count = int(np.prod(shape))
    size = _parameters(spec, f"input {INPUT!r}").get("binary_data_size")
    if size is not None:
        if not _whole(size):
            raise ApiError(400, "bad_request", f"binary_data_size must be a whole number of "
                           f"bytes, got {clip(repr(size))}")
        if size != count * 4 or len(binary) < size:
            raise ApiError(400, "bad_request", f"binary_data_size {size} does not match shape "
                           f"{shape} (FP32: {count * 4} bytes) or the {len(binary)} bytes sent")
        array = np.frombuffer(binary[:size], dtype="<f4").astype(np.float32)
    else:
        data = spec.get("data")
        if data is None:
            raise ApiError(400, "bad_request", f"input {INPUT!r} needs 'data' (its values) or "
                           "parameters.binary_data_size (its bytes after the JSON)")
        if not _numbers(data):  # numpy would take "0.1" and true as numbers
            raise ApiError(400, "bad_request", f"input {INPUT!r} data must be JSON numbers "
                           "(lists of them), not strings or booleans")
        try:
            with np.errstate(over="ignore"):  # past FP32's range: refused just below
                array = np.asarray(data, dtype=np.float32).ravel()
        except (TypeError, ValueError):
            raise ApiError(400, "bad_request", f"input {INPUT!r} data is not numbers") from None
        if array.size != count:
            raise ApiError(400, "bad_request",
                           f"input {INPUT!r} has {array.size} values; shape {shape} needs {count}")
    if not np.isfinite(array).all():  # NaN, or a JSON number past FP32's range: no reply
        raise ApiError(400, "bad_request",  # in JSON could carry the logits back
                       f"input {INPUT!r} has NaN or infinite values (as FP32)")
    return array.reshape(shape)


def _binary_wanted(header: dict[str, Any]) -> bool:
    outputs = header.get("outputs")
    everything = _flag(_parameters(header, "the request's"), "binary_data_output", False)
    if outputs is not None and not isinstance(outputs, list):
        raise ApiError(400, "bad_request", "'outputs' must be a list")
    if not outputs:
        return everything
    if len(outputs) != 1 or not isinstance(outputs[0], dict) or outputs[0].get("name") != OUTPUT:
        raise ApiError(400, "bad_request", f"the only output is {OUTPUT!r}")
    params = _parameters(outputs[0], f"output {OUTPUT!r}")
    if "classification" in params:
        raise ApiError(400, "bad_request", "the classification extension is not supported")
    return _flag(params, "binary_data", everything)
