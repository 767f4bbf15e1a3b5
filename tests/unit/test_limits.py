"""Issue 13, items 1 and 2: no request stalls another; limits before allocation.

Each test fails without its change: the ordering test deadlocks (its guard times out) when parsing
runs on the event loop; the decode tests see an array allocated instead of a refusal; the text
tests see the whole client input in the message; the parser tests see the slow path taken.
"""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
import numpy as np
import orjson
import pytest
from google.protobuf import json_format

from gateway._proto import grps_pb2
from gateway._proto.tensorflow.core.framework import tensor_pb2
from gateway.app import Worker, grpc_server_options
from gateway.core import bounded, datatypes
from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import element_count
from gateway.dialects.grps import codec as grps_codec
from gateway.dialects.mindie import validate
from gateway.dialects.tfserving import codec as tf_codec
from gateway.dialects.tfserving import jsonio, protocodec
from gateway.settings import Limits, Settings
from tests.fakes import FakeUpstream
from tests.support import free_port, worker_settings


@pytest.fixture
def limits():
    """bounded.LIMITS for one test, restored after it."""
    saved = dict(vars(bounded.LIMITS))
    yield bounded.LIMITS
    vars(bounded.LIMITS).update(saved)


def test_the_process_limits_default_to_the_schemas():
    assert vars(bounded.LIMITS) == {k: getattr(Limits(), k) for k in vars(bounded.LIMITS)}


# -- limits before allocation ---------------------------------------------------------------------
def test_tf_fill_rule_cannot_expand_a_tiny_proto_past_the_limit():
    """The 18-byte TensorProto of the issue: shape [2^28] float, one float_val -> 1 GiB by TF's fill rule."""
    tp = tensor_pb2.TensorProto(dtype=1, float_val=[1.0])
    tp.tensor_shape.dim.add(size=2**28)
    wire = tp.SerializeToString()
    assert len(wire) == 18
    with pytest.raises(GatewayError) as e:
        protocodec.tensor_from_proto(tensor_pb2.TensorProto.FromString(wire), "x")
    assert e.value.kind is ErrorKind.INVALID_ARGUMENT
    assert e.value.message.startswith("tensor parsing error: x: shape [268435456] of FP32 takes 1073741824 bytes")


def test_a_declared_shape_over_the_tensor_limit_is_refused_before_any_array(limits, monkeypatch):
    limits.max_tensor_bytes = 1 << 20
    tp = tensor_pb2.TensorProto(dtype=1, float_val=[1.0])
    tp.tensor_shape.dim.add(size=(1 << 18) + 1)  # one float past 1 MiB
    monkeypatch.setattr(np, "full", _no_allocation)
    with pytest.raises(GatewayError, match="limits.max_tensor_bytes"):
        protocodec.tensor_from_proto(tp, "x")
    gt = grps_pb2.GenericTensor(name="g", dtype=grps_pb2.DT_FLOAT64, shape=[1 << 17, 2], flat_float64=[1.0])
    with pytest.raises(GatewayError, match="tensor 'g': shape \\[131072, 2\\] of FP64 takes 2097152 bytes"):
        grps_codec.tensor_from_generic(gt)
    with pytest.raises(GatewayError, match="limits.max_tensor_bytes"):  # TF REST: ints become int64
        tf_codec.to_array([1] * ((1 << 17) + 1), "INT64", "x")


def test_a_small_tf_body_still_has_its_ragged_shape_checked_against_the_limit(limits):
    """``within`` skips the size check only when numpy's conversion succeeds (its array then holds at
    most size / 2 numbers); a ragged body, whose first elements imply a far larger shape than it
    holds, is still refused by the limit as before, not read further."""
    limits.max_tensor_bytes = 1 << 20
    ragged = [[1.0] * 1024] + [[]] * 1024  # implies [1025, 1024] floats: 4 MiB, from a 6 KiB body
    body = len(json.dumps({"instances": ragged}))
    assert tf_codec.within_limit(body) and not tf_codec.within_limit(limits.max_tensor_bytes)
    for within in (False, True):
        with pytest.raises(GatewayError, match="limits.max_tensor_bytes"):
            tf_codec.to_array(ragged, "FP32", "x", bools=False, within=within)


def _no_allocation(*_a, **_k):
    raise AssertionError("allocated before the limit was checked")


def test_tensor_content_of_a_wrong_length_is_a_client_error_not_a_crash():
    tp = tensor_pb2.TensorProto(dtype=1, tensor_content=b"\0" * 5)
    tp.tensor_shape.dim.add(size=1)
    with pytest.raises(GatewayError, match="tensor parsing error: x"):
        protocodec.tensor_from_proto(tp, "x")


def test_json_depth_is_limited_in_tf_and_grps(limits):
    deep = b'{"instances": [1], "x": ' + b"[" * 40 + b"]" * 40 + b"}"
    assert jsonio.loads(deep)["instances"] == [1]  # TF's own rule: any depth
    with pytest.raises(GatewayError, match="nested more than 20 levels"):
        jsonio.loads(deep, max_depth=20)
    with pytest.raises(GatewayError, match="nested more than 20 levels"):  # the tolerant (NaN) path too
        jsonio.loads(deep.replace(b"[1]", b"[NaN]"), max_depth=20)
    with pytest.raises(GatewayError, match="nested more than 1024 levels"):  # past orjson's depth: at once
        jsonio.loads(b"[" * 5000 + b"]" * 5000, max_depth=1024)
    limits.max_json_depth = 20
    with pytest.raises(GatewayError, match="nested more than 20 levels"):
        grps_codec.load_json(deep)


def test_prompt_length_is_limited(limits):
    limits.max_prompt_chars = 10
    assert validate.text({"inputs": "x" * 10}, "inputs") == "x" * 10
    with pytest.raises(GatewayError, match="Parameter inputs must be at most 10 characters, got 11."):
        validate.text({"inputs": "x" * 11}, "inputs")


def test_grpc_listeners_bound_streams_per_connection():
    settings = worker_settings({}, "127.0.0.1:1", LIMITS__MAX_GRPC_STREAMS="7")
    assert ("grpc.max_concurrent_streams", 7) in grpc_server_options(settings, False)
    assert ("grpc.max_concurrent_streams", 100) in grpc_server_options(Settings(), False)


def test_datatype_byte_sizes_come_from_the_one_table():
    assert datatypes.by_v2("FP32").nbytes(3) == 12 and datatypes.by_v2("BF16").nbytes(3) == 6
    assert datatypes.by_v2("BYTES").nbytes(3) == 24  # the object pointers: a lower bound


# -- error texts from bounded prefixes ------------------------------------------------------------
def test_error_texts_quote_only_a_prefix_of_client_input():
    with pytest.raises(GatewayError) as e:
        element_count([1] * 100_000 + [-1], "n" * 1_000_000)
    assert len(e.value.message) < 1000
    gt = grps_pb2.GenericTensor(name="n" * 1_000_000, dtype=grps_pb2.DT_INT32, shape=[3], flat_int32=[1])
    with pytest.raises(GatewayError) as e:
        grps_codec.tensor_from_generic(gt)
    assert len(e.value.message) < 1000
    with pytest.raises(GatewayError) as e:
        validate.number({"top_p": "x" * 1_000_000}, "top_p", 0.0, 1.0)
    assert len(e.value.message) < 1000
    with pytest.raises(GatewayError) as e:
        tf_codec.parse_predict({"instances": [{"k" * 1_000_000: 1}]}, _sig())
    assert len(e.value.message) < 1000


def _sig():
    from gateway.core.tensors import TensorSpec
    from gateway.dialects.tfserving.mapping import Signature

    spec = TensorSpec("x", "FP32", (-1,))
    return Signature("serving_default", "predict", "m", 0, (("x", spec),), (("y", spec),))


def test_a_large_tf_body_with_a_syntax_error_is_not_parsed_twice(monkeypatch):
    """The issue's 1.8 s: a regex over the whole body and the stdlib parser after orjson. Now a
    large body is worded from orjson's error position alone."""
    body = b'{"instances": [' + b"1.5," * 100_000 + b"]}"  # a trailing comma at the end

    class NoSecondParse:
        def raw_decode(self, *_a):
            raise AssertionError("the body was parsed a second time")

    monkeypatch.setattr(jsonio, "_DECODER", NoSecondParse())
    with pytest.raises(GatewayError) as e:
        jsonio.loads(body)
    assert e.value.message == f"JSON Parse error: Invalid value. at offset: {len(body) - 2}"
    with pytest.raises(GatewayError, match="Missing a comma or '}' after an object member. at offset: 400016"):
        jsonio.loads(b'{"instances": [' + b"1.5," * 99_999 + b'1.5] "x": 1}')


def test_grps_numeric_gtensors_skip_json_format_value_by_value(monkeypatch):
    """The issue's 2.1 s per million floats: json_format converted every value in Python."""
    seen = []
    real = json_format.ParseDict

    def spy(doc, msg, **kw):
        seen.append(orjson.dumps(doc))
        return real(doc, msg, **kw)

    monkeypatch.setattr(json_format, "ParseDict", spy)
    values = [0.5] * 10_000
    msg = grps_codec.parse_message({"gtensors": {"tensors": [{"name": "x", "shape": [10_000], "flatFloat32": values},
                                                             {"name": "y", "flat_int64": [1, 2]}]}})
    assert list(msg.gtensors.tensors[0].flat_float32) == values and list(msg.gtensors.tensors[1].flat_int64) == [1, 2]
    assert seen == []  # numbers taken out, the rest a plain gtensors request: json_format not called at all
    grps_codec.parse_message({"gtensors": {"tensors": [{"name": "x", "flat_float32": values, "extra": 1}]}})
    assert len(seen) == 1 and len(seen[0]) < 200  # not plain: json_format, without the numbers
    with pytest.raises(GatewayError, match="Failed to parse flat_int32"):  # non-numbers: json_format's words
        grps_codec.parse_message({"gtensors": {"tensors": [{"flat_int32": [1, True]}]}})


# -- no request may stall another -----------------------------------------------------------------
@pytest.fixture
async def live():
    ports = {name: free_port() for name in ("tfserving_rest", "grps_http")}
    settings = worker_settings(ports, "127.0.0.1:1", LIMITS__OFFLOAD_BYTES="1000", LIMITS__MAX_HEADER_BYTES="2048")
    w = Worker(settings, upstream_factory=lambda _s: FakeUpstream())
    await w.start()
    async with aiohttp.ClientSession() as http:
        yield ports, http
    await w.stop(grace=0.1)


@pytest.mark.parametrize(("module", "name", "listener", "path"), [
    (jsonio, "loads", "tfserving_rest", "/v1/models/m:predict"),
    (grps_codec, "decode_predict", "grps_http", "/grps/v1/infer/predict"),
])
async def test_a_small_request_is_answered_while_a_large_body_is_still_being_parsed(live, monkeypatch,
                                                                                    module, name, listener, path):
    """The large body's parse cannot finish before the small request's answer has arrived: inline on
    the event loop (before), that is a deadlock the guard ends and the order shows it."""
    ports, http = live
    started, answered, order = threading.Event(), threading.Event(), []
    real = getattr(module, name)

    def parse(body, *args):
        if len(body) > 1000:  # the hostile body
            started.set()
            order.append("large parsed" if answered.wait(timeout=10) else "large parse gave up waiting")
        return real(body, *args)

    monkeypatch.setattr(module, name, parse)
    base = f"http://127.0.0.1:{ports[listener]}"
    body = b'{"instances": [' + b"1.5," * 2000 + b'1.5], "str_data": "x"}'
    large = asyncio.create_task(http.post(base + path, data=body, headers={"Content-Type": "application/json"}))
    await asyncio.to_thread(started.wait, 10)
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models") as r:  # small, same worker
        assert r.status == 400
        order.append("small answered")
        answered.set()
    async with await large as r:
        # parsed, then the fake upstream has no such model (GRPS: 500, in the body under HTTP 200, as
        # GRPS's C++ server answers with http_error_status off, the default)
        code = r.status if listener != "grps_http" else orjson.loads(await r.read())["status"]["code"]
        assert code in (404, 500, 503) and (listener != "grps_http" or r.status == 200)
    assert order == ["small answered", "large parsed"]


async def test_oversized_headers_are_refused_in_the_envelope(live):
    ports, http = live
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models",
                        headers={"X-Big": "x" * 4096}) as r:
        assert r.status == 431
        assert "error" in orjson.loads(await r.read())
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models") as r:  # still serving
        assert r.status == 400


@pytest.fixture
async def live_ctx():
    ports = {"tfserving_rest": free_port(), "grps_http": free_port()}
    w = Worker(worker_settings(ports, "127.0.0.1:1", LIMITS__MAX_INFLIGHT="3"), upstream_factory=lambda _s: FakeUpstream())
    ctx = await w.start()
    yield ctx, ports
    await w.stop(grace=0.1)


@pytest.mark.parametrize(("listener", "path", "status"), [
    ("tfserving_rest", "/v1/models/m:predict", b"503"), ("grps_http", "/grps/v1/infer/predict", b"503")])
async def test_admission_answers_before_the_body_is_read(live_ctx, listener, path, status):
    """Over the in-flight limit, the overloaded answer comes while the client has sent only the
    headers of a 50 MB body: nothing of it was read (or buffered) first."""
    ctx, ports = live_ctx
    ctx.admission.inflight = ctx.admission.limit  # as if 3 requests were in flight
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", ports[listener])
        writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {50 << 20}\r\n\r\n".encode() + b'{"instances": [')
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # a guard, not a timing check
        assert head.split(b" ")[1] == status
        writer.close()
    finally:
        ctx.admission.inflight = 0


async def test_an_admitted_request_still_gets_its_whole_body_and_the_size_limit(live_ctx):
    _, ports = live_ctx
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/m:predict"
        async with http.post(url, data=b'{"instances": [1.0]}') as r:  # read whole: model lookup happened
            assert r.status == 404
            assert orjson.loads(await r.read()) == {"error": "Servable not found for request: Latest(m)"}


def test_narrow_int_val_wraps_as_tf_casts_it_instead_of_crashing():
    """int_val is int32 on the wire; TF casts it to int8/uint8/int16/uint16 (numpy refused: a 500)."""
    for dtype, values, want in ((6, [300, -1], [44, -1]), (4, [256, 255], [0, 255]), (17, [70000], [4464])):
        tp = tensor_pb2.TensorProto(dtype=dtype, int_val=values)
        tp.tensor_shape.dim.add(size=len(values))
        assert protocodec.tensor_from_proto(tp, "x")[0].tolist() == want


def test_names_are_limited_before_they_are_looked_up(limits):
    from gateway._proto.tensorflow_serving.apis import model_pb2

    limits.max_name_chars = 8
    with pytest.raises(GatewayError, match="Model name is 9 characters long, more than the 8 allowed"):
        protocodec.spec_from_proto(model_pb2.ModelSpec(name="m" * 9))
    with pytest.raises(GatewayError, match="Signature name is 9 characters long"):
        tf_codec.signature_name({"signature_name": "s" * 9})
    with pytest.raises(GatewayError, match="Tensor name is 9 characters long"):
        grps_codec.tensor_from_generic(grps_pb2.GenericTensor(name="t" * 9, flat_float32=[1.0]))
    tp = tensor_pb2.TensorProto(dtype=1, float_val=[1.0])
    with pytest.raises(GatewayError, match="Input alias is 9 characters long"):
        protocodec.tensor_from_proto(tp, "a" * 9)
    assert protocodec.spec_from_proto(model_pb2.ModelSpec(name="m" * 8)).name == "m" * 8
    from gateway.dialects.grps import mapping as grps_mapping
    from gateway.dialects.grps.config import GrpsSettings

    with pytest.raises(GatewayError, match="Model name is 9 characters long"):  # GRPS HTTP and gRPC alike
        grps_mapping.resolve("m" * 9, GrpsSettings())
    assert grps_mapping.resolve("m" * 6 + "-1", GrpsSettings()).name == "m" * 6 + "-1"


def test_tf_signature_errors_quote_many_long_client_names_from_a_bounded_prefix():
    from gateway.core.tensors import TensorSpec
    from gateway.dialects.tfserving import errors as tf_errors
    from gateway.dialects.tfserving import service as tf_service
    from gateway.dialects.tfserving.mapping import Signature

    spec = TensorSpec("x", "FP32", (-1,))
    sig = Signature(name="serving_default", method="predict", triton="m", max_batch_size=0,
                    inputs=(("x", spec),), outputs=(("y", spec),))
    inputs = {f"{i:06d}" + "n" * 1000: None for i in range(2000)}  # 2 MB of names
    with pytest.raises(GatewayError) as e:
        tf_service._check_inputs(sig, inputs)
    assert e.value.message.startswith("input size does not match signature: 2000!=1 len({000000nnn")
    assert len(e.value.message) < 2000
    with pytest.raises(GatewayError) as e:
        tf_service._filter(sig, ["z" * 1_000_000])
    assert len(e.value.message) < 2000
    assert len(tf_errors.unknown_label("l" * 1_000_000).message) < 2000


def test_keep_bounds_a_cache_of_client_keys():
    from gateway.core.bounded import keep

    cache: dict = {}
    for i in range(5):
        assert keep(cache, i, str(i), 3) == str(i)
        assert len(cache) <= 3 and cache[i] == str(i)
    assert cache == {3: "3", 4: "4"}  # emptied when full, then the new entry
