"""GRPS HTTP (7080) against the real Triton, with plain ``requests`` as GRPS's own clients use."""

from __future__ import annotations

import time

import numpy as np
import pytest
import requests
import yaml

OK = {"code": 200, "msg": "OK", "status": "SUCCESS"}
SEED_GTENSORS = {
    "gtensors": {
        "tensors": [
            {"name": "in1", "dtype": "DT_INT32", "shape": [3, 2], "flat_int32": [1, 2, 3, 4, 5, 6]},
            {"name": "in2", "dtype": "DT_FLOAT64", "shape": [3, 3],
             "flat_double": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]},
        ]
    }
}
SEED_NDARRAY = [[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]]


@pytest.fixture(scope="module")
def url(gateway):
    base = gateway.url("grps_http")
    yield base
    requests.get(f"{base}/grps/v1/health/online", timeout=5)  # leave the shared gateway online


def predict(url, body=None, params=None, **kw):
    return requests.post(f"{url}/grps/v1/infer/predict", json=body, params=params, timeout=30, **kw)


def failure(code: int, msg: str, more: str = "") -> str:
    """GRPS's SetStatus(code, msg, FAILURE) as its C++ Pb2json writes it (add_whitespace), ``more``
    the fields after the status; the C++ server sends it with HTTP 200 (it never sets the status)."""
    msg = msg.replace("<", "\\u003c").replace(">", "\\u003e")  # protobuf's JSON escapes (json_escaping.cc)
    return (f'{{\n "status": {{\n  "code": {code},\n  "msg": "{msg}",\n  "status": "FAILURE"\n }}'
            f"{more}\n}}\n")


def assert_answer(r, body: str) -> None:
    """The whole answer: HTTP 200, a JSON Content-Type, these bytes."""
    assert (r.status_code, r.headers["content-type"], r.text) == (200, "application/json", body)


# -- the seed's examples, verbatim ----------------------------------------------------------------
@pytest.mark.parametrize("op", ["online", "live", "ready", "offline"])
def test_health_endpoints_answer_ok(url, op):
    r = requests.get(f"{url}/grps/v1/health/{op}", timeout=5)
    assert (r.status_code, r.json()) == (200, {"status": OK})
    requests.get(f"{url}/grps/v1/health/online", timeout=5)


def test_readiness_follows_the_online_switch(url):
    assert requests.get(f"{url}/grps/v1/health/offline", timeout=5).ok
    r = requests.get(f"{url}/grps/v1/health/ready", timeout=5)
    assert_answer(r, failure(503, "Service Unavailable"))  # grps_handler.cc CheckReadiness
    assert requests.post(f"{url}/grps/v1/health/online", json={}, timeout=5).json() == {"status": OK}
    assert requests.get(f"{url}/grps/v1/health/ready", timeout=5).json() == {"status": OK}


def test_seed_str_data(url):
    r = predict(url, {"str_data": "hello grps"})
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == {"status": OK, "str_data": "hello grps"}


def test_seed_ndarray_with_return_ndarray(url):
    r = predict(url, {"ndarray": SEED_NDARRAY}, params={"return-ndarray": "true"})
    assert r.json() == {"status": OK, "ndarray": SEED_NDARRAY}


def test_answers_are_the_cpp_servers_exact_text(url):
    """Byte for byte what GRPS's protobuf C++ printer (add_whitespace) and rapidjson PrettyWriter write."""
    status = '"status": {\n  "code": 200,\n  "msg": "OK",\n  "status": "SUCCESS"\n }'
    assert requests.get(f"{url}/grps/v1/health/live", timeout=5).text == "{\n " + status + "\n}\n"
    r = predict(url, {"gtensors": {"tensors": [{"name": "f32", "dtype": "DT_FLOAT32", "shape": [3],
                                                "flat_float32": [1, 0.1, 1e6]}]}})
    assert r.text == ("{\n " + status + ',\n "gtensors": {\n  "tensors": [\n   {\n    "name": "f32_out",\n'
                      '    "dtype": "DT_FLOAT32",\n    "shape": [\n     3\n    ],\n'
                      '    "flat_float32": [\n     1,\n     0.1,\n     1e+06\n    ]\n   }\n  ]\n }\n}\n')
    r = predict(url, {"ndarray": [[[1.5, 2]]]}, params={"return-ndarray": "true"})
    assert r.text == "{\n " + status + ',\n "ndarray": [\n  [\n   [\n    1.5,\n    2.0\n   ]\n  ]\n ]\n}'


def test_seed_ndarray_without_return_ndarray_answers_gtensors(url):
    tensors = predict(url, {"ndarray": SEED_NDARRAY}).json()["gtensors"]["tensors"]
    assert tensors == [{"name": "ndarray_out", "dtype": "DT_FLOAT32", "shape": [2, 2, 3],
                        "flat_float32": [float(v) for v in range(1, 13)]}]


def test_seed_gtensors_answers_flat_float64(url):
    r = predict(url, SEED_GTENSORS)
    assert r.status_code == 200
    expected = {"status": OK, "gtensors": {"tensors": [
        {"name": "out1", "dtype": "DT_INT32", "shape": [3, 2], "flat_int32": [1, 2, 3, 4, 5, 6]},
        {"name": "out2", "dtype": "DT_FLOAT64", "shape": [3, 3], "flat_float64": [float(v) for v in range(1, 10)]},
    ]}}
    assert r.json() == expected


def test_seed_bin_data_as_octet_stream(url):
    payload = bytes(range(256)) * 16
    r = requests.post(f"{url}/grps/v1/infer/predict", data=payload,
                      headers={"content-type": "application/octet-stream"}, timeout=30)
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.content == payload


def test_seed_model_selection_query_and_body(url):
    r = requests.post(f"{url}/grps/v1/infer/predict?model=your_model-1.0.0",
                      headers={"Content-Type": "application/json"}, data='{"str_data": "hello grps"}', timeout=30)
    assert r.json() == {"status": OK, "str_data": "hello grps"}
    # the body's model wins over the query's
    r = predict(url, {"model": "your_model-1.0.0", "str_data": "hi"}, params={"model": "no_such-1"})
    assert r.json()["str_data"] == "hi"
    r = predict(url, {"model": "no_such-1", "str_data": "hi"}, params={"model": "your_model-1.0.0"})
    assert_answer(r, failure(500, "Not found model: no_such-1"))  # GRPS's executor


def test_seed_metadata_server_and_model_are_yaml(url):
    r = requests.get(f"{url}/grps/v1/metadata/server", timeout=10).json()
    assert r["status"] == OK
    doc = yaml.safe_load(r["str_data"])
    assert "saved_model_half_plus_three-123" in doc["models"] and "tiny_llm-1" in doc["models"]
    assert "gateway_config" not in doc["grps"]  # only with dialects.grps.server_metadata_config: true
    r = requests.post(f"{url}/grps/v1/metadata/model", json={"str_data": "saved_model_half_plus_three"},
                      timeout=10).json()
    doc = yaml.safe_load(r["str_data"])
    assert doc["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1], "optional": False}]


def test_model_metadata_is_asked_by_inference_yml_name_as_grps_template_client_asks(url):
    """GRPS's ModelMetadata compares str_data with inference.yml's models[].name, the bare name its
    template client sends (``your_model``); ``name-version``, "" and unknown names are 404 ``Not Found``
    (grps_handler.cc), with HTTP 200 and Content-Type application/json."""
    r = requests.post(f"{url}/grps/v1/metadata/model", json={"str_data": "your_model"}, timeout=10)
    assert r.status_code == 200 and r.json()["status"] == OK
    doc = yaml.safe_load(r.json()["str_data"])
    assert (doc["name"], doc["version"], doc["triton_model"], doc["triton_version"]) == \
        ("your_model", "1.0.0", "grps_echo", "1")
    for name in ("your_model-1.0.0", "saved_model_half_plus_three-123", "nope", ""):
        r = requests.post(f"{url}/grps/v1/metadata/model", json={"str_data": name}, timeout=10)
        assert_answer(r, failure(404, "Not Found"))


# -- other Triton models and payload kinds --------------------------------------------------------
def test_half_plus_three_by_name_version(url):
    body = {"model": "saved_model_half_plus_three-123",
            "gtensors": {"tensors": [{"name": "x", "dtype": "DT_FLOAT32", "shape": [3], "flat_float32": [1, 2, 5]}]}}
    t = predict(url, body).json()["gtensors"]["tensors"][0]
    assert t == {"name": "y", "dtype": "DT_FLOAT32", "shape": [3], "flat_float32": [3.5, 4.0, 5.5]}


def test_unnamed_tensors_are_fed_by_position_and_camel_case_is_accepted(url):
    body = {"model": "saved_model_half_plus_three-123",
            "gtensors": {"tensors": [{"dtype": 7, "shape": [2], "flatFloat32": [0, 2]}]}}
    assert predict(url, body).json()["gtensors"]["tensors"][0]["flat_float32"] == [3.0, 4.0]


@pytest.mark.parametrize(
    "name,dtype,field,values,answer",
    [
        ("u8", "DT_UINT8", "flat_uint8", [0, 7, 255], [0, 7, 255]),
        ("i8", "DT_INT8", "flat_int8", [-128, 0, 127], [-128, 0, 127]),
        ("i16", "DT_INT16", "flat_int16", [-32768, 1, 32767], [-32768, 1, 32767]),
        ("i64", "DT_INT64", "flat_int64", [-(2**62), 1, 2**62], [str(-(2**62)), "1", str(2**62)]),
        ("f16", "DT_FLOAT16", "flat_float16", [0.5, -2.0, 1024.0], [0.5, -2.0, 1024.0]),
        ("f32", "DT_FLOAT32", "flat_float32", [0.25, -1.5, 3.0], [0.25, -1.5, 3.0]),
        ("s", "DT_STRING", "flat_string", ["a", "é", ""], ["a", "é", ""]),
    ],
)
def test_every_grps_dtype_round_trips(url, name, dtype, field, values, answer):
    body = {"gtensors": {"tensors": [{"name": name, "dtype": dtype, "shape": [3], field: values}]}}
    t = predict(url, body).json()["gtensors"]["tensors"][0]
    assert t == {"name": f"{name}_out", "dtype": dtype, "shape": [3], field: answer}


def test_gmap_keys_feed_inputs_of_the_same_name(url):
    r = predict(url, {"gmap": {"s_s": {"text": "hello map"}}}).json()
    assert r == {"status": OK, "gmap": {"s_s": {"text_out": "hello map"}}}
    r = predict(url, {"gmap": {"s_b": {"text": "/w=="}}}).json()  # b"\xff": not UTF-8 → s_b
    assert r["gmap"] == {"s_b": {"text_out": "/w=="}}


@pytest.mark.parametrize("size", [(1 << 20) - 1, 1 << 20, (16 << 20) + 3])  # around gateway/edge/httpbody.py's MIN_BYTES
def test_large_bin_data_comes_back_byte_for_byte(url, size):
    """A large octet-stream body (read into one buffer, sent to Triton as it is, its answer taken as a
    view of gRPC's bytes) is echoed unchanged, also when the client waits for 100-continue."""
    payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    for headers in ({}, {"expect": "100-continue"}):
        r = requests.post(f"{url}/grps/v1/infer/predict", data=payload, timeout=60,
                          headers={"content-type": "application/octet-stream", **headers})
        assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
        assert r.content == payload


def test_tiny_llm_answers_text_over_str_data(url):
    r = predict(url, {"model": "tiny_llm-1", "str_data": "hello"}).json()
    assert r["status"] == OK and r["str_data"].startswith("hello") and len(r["str_data"].split()) > 3
    short = predict(url, {"model": "short_llm-1", "str_data": "hello"}).json()["str_data"]
    assert len(short.split()) == 3  # the prompt glued to the first token, then max_tokens=3 in all


def test_streaming_delivers_messages_as_they_are_produced(url):
    arrivals, texts = [], []
    with predict(url, {"model": "tiny_llm-1", "str_data": "hello"}, params={"streaming": "true"}, stream=True) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers.get("transfer-encoding") == "chunked"
        start = time.monotonic()
        for chunk in r.iter_content(chunk_size=None):
            arrivals.append(time.monotonic() - start)
            assert chunk.startswith(b'{\n "status": {\n  "code": 200,') and chunk.endswith(b'"\n}\n')
            doc = requests.models.complexjson.loads(chunk)
            assert doc["status"] == OK
            texts.append(doc["str_data"])
    assert len(texts) >= 8 and all(t.startswith(" ") for t in texts[1:])
    unary = predict(url, {"model": "tiny_llm-1", "str_data": "hello"}).json()["str_data"]
    assert "hello" + "".join(texts) == unary
    assert arrivals[-1] - arrivals[0] > 0.08  # 15 ms per token: spread out, not one burst at the end
    assert len({round(a, 2) for a in arrivals}) > len(arrivals) // 2


# -- bad input ------------------------------------------------------------------------------------
JSON_CT = {"content-type": "application/json"}
TWO_INPUTS = {"gtensors": {"tensors": [{"name": "in1", "dtype": "DT_INT32", "shape": [1, 1], "flat_int32": [1]},
                                       {"name": "f32", "dtype": "DT_FLOAT32", "shape": [1], "flat_float32": [1]}]}}
INT_INPUT = {"gtensors": {"tensors": [TWO_INPUTS["gtensors"]["tensors"][0]]}}
ND = {"return-ndarray": "true"}
BOTH = {"streaming": "true", "return-ndarray": "true"}
BAD = "Bad Request, err: "


@pytest.mark.parametrize(
    "kwargs,answer",
    [
        # PredictByHttp: streaming + return-ndarray is refused before the Content-Type is looked at
        ({"json": {"str_data": "x"}, "params": BOTH},
         failure(400, BAD + "Streaming and ret ndarray are not supported at the same time.")),
        ({"data": b"{not json", "headers": {"content-type": "text/plain"}, "params": BOTH},
         failure(400, BAD + "Streaming and ret ndarray are not supported at the same time.")),
        ({"data": b"{}", "params": BOTH},
         failure(400, BAD + "Streaming and ret ndarray are not supported at the same time.")),
        # then the Content-Type: compared with application/json and application/octet-stream (brpc
        # reads a missing one as "")
        ({"data": b"{}", "headers": {"content-type": "text/plain"}}, failure(400, BAD + "Content type is not supported.")),
        ({"data": b"{}"}, failure(400, BAD + "Content type is not supported.")),
        ({"data": b"{}", "headers": {"content-type": ""}}, failure(400, BAD + "Content type is not supported.")),
        # then rapidjson and the keys
        ({"data": b"{not json", "headers": JSON_CT}, failure(400, BAD + "Parse json failed.")),
        ({"data": b"", "headers": JSON_CT}, failure(400, BAD + "Parse json failed.")),
        ({"json": {"bin_data": "aGk="}}, failure(400, BAD + "bin_data should use application/octet-stream format.")),
        ({"json": {"foo": 1}}, failure(400, BAD + "Have no legal member in json body.")),
        # ParseNDArray (depth first: the first refusal)
        ({"json": {"ndarray": [[1, 2], [3]]}}, failure(400, BAD + "Parse NDArray failed: NDArray some array size not match.")),
        ({"json": {"ndarray": [[1, 2], []]}}, failure(400, BAD + "Parse NDArray failed: NDArray some array size <= 0.")),
        ({"json": {"ndarray": [[1, "a"], [2]]}},
         failure(400, BAD + "Parse NDArray failed: NDArray some array is not a number or array.")),
        ({"json": {"ndarray": [[1, True]]}},
         failure(400, BAD + "Parse NDArray failed: NDArray some array is not a number or array.")),
        ({"json": {"ndarray": "x"}}, failure(400, BAD + "NDArray is not number or array.")),
        ({"json": {"ndarray": None}}, failure(400, BAD + "NDArray is not number or array.")),
        # the executor: any exception is status 500 with its text
        ({"json": {"model": "no_such_model-1", "str_data": "x"}}, failure(500, "Not found model: no_such_model-1")),
        # GenNDArrayFromGrpsMsg (str_data, bin_data and gtensors cleared; gmap kept)
        ({"json": TWO_INPUTS, "params": ND}, failure(500, "NDArray only support one tensor")),
        ({"json": INT_INPUT, "params": ND}, failure(500, "NDArray only support float32")),
        ({"json": {"str_data": "x"}, "params": ND}, failure(500, "No tensors in output. Cannot convert to ndarray.")),
        ({"json": {"gmap": {"s_s": {"text": "hi"}}}, "params": ND},
         failure(500, "No tensors in output. Cannot convert to ndarray.",
                 ',\n "gmap": {\n  "s_s": {\n   "text_out": "hi"\n  }\n }')),
    ],
)
def test_grps_refusals_are_the_cpp_servers_whole_answer(url, kwargs, answer):
    """Texts, codes and order from server/cpp_server/src/handler/grps_handler.cc (PredictByHttp,
    ParseNDArray, GenNDArrayFromGrpsMsg), printed by Pb2json, sent with HTTP 200."""
    r = requests.post(f"{url}/grps/v1/infer/predict", timeout=30, **kwargs)
    assert_answer(r, answer)
    assert predict(url, {"str_data": "still serving"}).json()["str_data"] == "still serving"


@pytest.mark.parametrize(
    "kwargs,code,text",
    [  # refusals of the gateway's own (a Triton model's declared inputs; GRPS's converters differ)
        ({"json": {"gtensors": {"tensors": [{"name": "in1", "dtype": "DT_INT32", "shape": [3, 2],
                                             "flat_int32": [1, 2, 3]}]}}}, 400, "do not fill shape [3, 2]"),
        ({"json": {"gtensors": {"tensors": [{"name": "nope", "dtype": "DT_INT32", "shape": [1],
                                             "flat_int32": [1]}]}}}, 400, "has no input 'nope'"),
        ({"json": {"gtensors": {"tensors": [{"name": "in1", "dtype": "DT_FLOAT32", "shape": [1, 1],
                                             "flat_float32": [1]}]}}}, 400, "is INT32, not FP32"),
        ({"json": {"gtensors": {"tensors": [{"name": "u8", "dtype": "DT_UINT8", "shape": [1],
                                             "flat_uint8": [256]}]}}}, 400, "out of range for DT_UINT8"),
        ({"json": {"ndarray": [1, 2]}}, 400, "rank 3"),
        ({"json": {"model": "saved_model_half_plus_three-123", "str_data": "x"}}, 400, "has no BYTES input"),
    ],
)
def test_bad_input_is_a_failure_with_the_right_code(url, kwargs, code, text):
    r = requests.post(f"{url}/grps/v1/infer/predict", timeout=30, **kwargs)
    body = r.json()
    assert r.status_code == 200, body  # the C++ server's HTTP status (dialects.grps.http_error_status: false)
    assert body["status"]["code"] == code and body["status"]["status"] == "FAILURE"
    assert text in body["status"]["msg"]
    assert "Traceback" not in body["status"]["msg"]
    assert predict(url, {"str_data": "still serving"}).json()["str_data"] == "still serving"


def test_unknown_route_is_a_grps_404(url):
    r = requests.get(f"{url}/grps/v1/nope", timeout=5)
    assert r.status_code == 404 and r.json()["status"]["status"] == "FAILURE"


# -- monitor --------------------------------------------------------------------------------------
def test_monitor_series_answer_as_grps_does(url):
    for _ in range(3):
        predict(url, {"str_data": "count me"})
    trend = requests.get(f"{url}/grps/v1/monitor/series", params={"name": "*qps"}, timeout=5).json()
    assert trend["label"] == "trend" and [p[0] for p in trend["data"]] == list(range(174))
    cdf = requests.get(f"{url}/grps/v1/monitor/series", params={"name": "*latency_cdf(ms)[grps_echo-1]"},
                       timeout=5).json()
    assert cdf["label"] == "cdf" and [p[0] for p in cdf["data"]][-3:] == [99, 100, 101]
    assert np.all(np.diff([p[1] for p in cdf["data"]]) >= 0) and cdf["data"][-1][1] > 0
    page = requests.get(f"{url}/grps/v1/monitor/metrics", timeout=5)
    assert page.headers["content-type"].startswith("text/html") and "<canvas" not in page.text.split("<script>")[0]
    assert requests.get(f"{url}/grps/v1/monitor/series", params={"name": "nope"}, timeout=5).status_code == 404
