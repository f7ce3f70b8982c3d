"""The Open Inference Protocol routes on the real worker: metadata as Triton's clients read it,
and infer (JSON and the binary-data extension) equal to the network's own output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")

from one_thread_worker import one_thread_worker

from ttball.client import parse_infer_response
from ttball.serve import ServeSettings

H, W = 72, 128
INFER = "/v2/models/blurball/infer"


@pytest.fixture(scope="module")
def server(small_weights):
    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1, 2),
                             torch_threads=1)
    with one_thread_worker(settings) as client:
        yield client


@pytest.fixture(scope="module")
def batch():
    return np.random.default_rng(0).standard_normal((2, 9, H, W)).astype(np.float32)


@pytest.fixture(scope="module")
def expected(small_model, batch):
    with torch.inference_mode():
        return small_model(torch.from_numpy(batch))[0].float().numpy()


def test_metadata_config_and_health(server) -> None:
    http = server.http
    assert http.get("/v2/health/live").status_code == 200
    assert http.get("/v2/health/ready").status_code == 200
    meta = http.get("/v2").json()
    assert meta["name"] == "ttball" and "binary_tensor_data" in meta["extensions"]
    model = http.get("/v2/models/blurball").json()
    assert model["name"] == "blurball" and model["versions"] == ["1"]
    assert model["inputs"] == [{"name": "frames", "datatype": "FP32", "shape": [-1, 9, H, W]}]
    assert model["outputs"] == [{"name": "heatmaps", "datatype": "FP32", "shape": [-1, 3, H, W]}]
    assert http.get("/v2/models/blurball/versions/1").json() == model
    assert http.get("/v2/models/blurball/ready").status_code == 200
    config = http.get("/v2/models/blurball/config").json()
    assert config["max_batch_size"] == 2
    assert config["input"][0]["dims"] == [9, H, W] and config["input"][0]["data_type"] == "TYPE_FP32"
    assert http.get("/v2/models/other").status_code == 404
    assert http.get("/v2/models/blurball/versions/7").json() == {
        "error": "unknown model 'blurball' version '7'; this worker serves 'blurball' version 1"}


def test_infer_json_equals_network(server, batch, expected) -> None:
    request = {"id": "r1", "inputs": [{"name": "frames", "shape": [2, 9, H, W], "datatype": "FP32",
                                       "data": batch.ravel().tolist()}]}
    reply = server.http.post(INFER, json=request)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["model_name"] == "blurball" and body["id"] == "r1"
    out = body["outputs"][0]
    assert out["name"] == "heatmaps" and out["datatype"] == "FP32" and out["shape"] == [2, 3, H, W]
    got = np.asarray(out["data"], np.float32).reshape(out["shape"])
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_infer_binary_equals_network(server, batch, expected) -> None:
    got = server.infer(batch, binary=True)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    # JSON request, binary answer asked for by the request-level parameter.
    request = {"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                           "data": batch[:1].ravel().tolist()}],
               "parameters": {"binary_data_output": True}}
    reply = server.http.post(INFER, json=request)
    length = reply.headers["Inference-Header-Content-Length"]
    header = json.loads(reply.content[:int(length)])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 3 * H * W * 4
    got = parse_infer_response(reply.content, length)
    np.testing.assert_allclose(got, expected[:1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("request_", "message"), [
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, 64], "datatype": "FP32", "data": [0]}]},
     "shape"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP16", "data": [0]}]},
     "FP32"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32", "data": [0, 1]}]},
     "values"),
    ({"inputs": [{"name": "frames", "shape": [3, 9, H, W], "datatype": "FP32", "data": [0]}]},
     "batch-size"),
    ({"inputs": [{"name": "pixels", "shape": [1, 9, H, W], "datatype": "FP32", "data": [0]}]},
     "frames"),
    ({"nothing": 1}, "inputs"),
    # wrong JSON types where objects, lists and integers belong
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32", "data": [0]}],
      "outputs": 5}, "'outputs' must be a list"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32", "data": [0],
                  "parameters": 5}]}, "parameters must be a JSON object"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32", "data": [0]}],
      "parameters": [1]}, "parameters must be a JSON object"),
    ({"inputs": [{"name": "frames", "shape": [True, 9, H, W], "datatype": "FP32", "data": [0]}]},
     "shape"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                  "parameters": {"binary_data_size": True}}]}, "binary_data_size"),
    # numpy took strings and booleans as numbers (200); a string size was shown as a number;
    # "false" as a string was true; missing data was "has 1 values"
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                  "data": ["0.1"] * (9 * H * W)}]}, "not strings or booleans"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                  "data": [0.5] * (9 * H * W - 1) + [True]}]}, "not strings or booleans"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                  "parameters": {"binary_data_size": "4"}}]},
     "binary_data_size must be a whole number of bytes, got '4'"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                  "data": [0.0] * (9 * H * W)}],
      "outputs": [{"name": "heatmaps", "parameters": {"binary_data": "false"}}]},
     "binary_data must be true or false"),
    ({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32"}]},
     "needs 'data'"),
])
def test_infer_errors_use_the_protocol_error_object(server, request_, message) -> None:
    reply = server.http.post(INFER, json=request_)
    assert reply.status_code == 400
    assert message in reply.json()["error"]


def test_binary_size_mismatch_is_refused(server) -> None:
    head = json.dumps({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 100}}]}).encode()
    reply = server.http.post(INFER, content=head + b"\0" * 100,
                             headers={"Inference-Header-Content-Length": str(len(head))})
    assert reply.status_code == 400 and "binary_data_size" in reply.json()["error"]


@pytest.mark.parametrize(("body", "message"), [
    (b"[" * 30_000 + b"]" * 30_000, "nested too deeply"),
    (b'{"inputs": [{"name": "frames", "data": [NaN]}]}', "not JSON"),
    (b"\x93\xff binary without its header", "Inference-Header-Content-Length"),
])
def test_infer_bodies_that_are_not_json_get_400(server, body, message) -> None:
    reply = server.http.post(INFER, content=body)
    assert reply.status_code == 400
    assert message in reply.json()["error"]


def test_the_header_length_hint_comes_only_for_a_body_that_looks_binary(server) -> None:
    """Every JSON error said "(binary data needs the Inference-Header-Content-Length header)",
    for a plain JSON request too."""
    reply = server.http.post(INFER, content=b'{"inputs": [}')
    assert reply.status_code == 400 and "Inference-Header" not in reply.json()["error"]


@pytest.mark.parametrize("length", [b"\xb2", b"1" + b"0" * 5000],
                         ids=["superscript-two", "5001-digits"])
def test_a_header_length_python_reads_as_digits_but_no_int_is_400(server, length) -> None:
    """``"²".isdigit()`` holds and ``int()`` refuses 5,000 digits: both were 500s."""
    reply = server.http.post(INFER, content=b"{}", headers={"Inference-Header-Content-Length": length})
    assert reply.status_code == 400
    assert "Inference-Header-Content-Length" in reply.json()["error"]


def test_inputs_that_are_not_finite_in_fp32_are_400_before_the_network(server, batch) -> None:
    """NaN in the binary section, or a JSON number past FP32's range: no JSON reply could carry
    the logits (a 500 after a whole network call before)."""
    bad = batch[:1].copy()
    bad[0, 0, 0, 0] = np.nan
    head = json.dumps({"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                                   "parameters": {"binary_data_size": bad.nbytes}}]}).encode()
    reply = server.http.post(INFER, content=head + bad.tobytes(),
                             headers={"Inference-Header-Content-Length": str(len(head))})
    assert reply.status_code == 400 and "NaN or infinite" in reply.json()["error"]
    data = batch[:1].ravel().tolist()
    data[5] = 1e39
    request = {"inputs": [{"name": "frames", "shape": [1, 9, H, W], "datatype": "FP32",
                           "data": data}]}
    reply = server.http.post(INFER, json=request)
    assert reply.status_code == 400 and "NaN or infinite" in reply.json()["error"]
    assert server.http.get("/v2/health/ready").status_code == 200
