"""The cutover core without a server: comparison rules, route choice and reload, the shadow's bounds
and deadline, the mismatch file's bounds, the report's reading of /metrics."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from prometheus_client import generate_latest

from gateway.cutover import Cutover, compare, failure
from gateway.cutover import open as open_cutover
from gateway.cutover.compare import Answer
from gateway.cutover.record import Recorder, read
from gateway.cutover.report import parse, render
from gateway.cutover.routing import Routes, metadata_getter
from gateway.cutover.settings import LegacySettings, MismatchLog
from gateway.observe import metrics

F32 = np.float32


def ans(**outs) -> Answer:
    return Answer(outputs={k: np.asarray(v) for k, v in outs.items()})


# -- compare ---------------------------------------------------------------------------------------
def test_floats_within_tolerance_match_and_report_their_error():
    c = compare(ans(y=np.array([1.0, 2.0], F32)), ans(y=np.array([1.0, 2.000001], F32)), 1e-5, 1e-5)
    assert c.outcome == "match"
    assert c.outputs["y"].reason == "" and 0 < c.outputs["y"].max_abs < 1e-5


def test_floats_beyond_tolerance_mismatch_with_max_abs_and_rel():
    c = compare(ans(y=np.array([1.0, 4.0], F32)), ans(y=np.array([1.0, 4.001], F32)), 1e-5, 1e-5)
    assert c.outcome == "mismatch" and c.differing == ["y"]
    d = c.outputs["y"]
    assert d.count == 1 and d.max_abs == pytest.approx(0.001, rel=1e-3) and d.max_rel == pytest.approx(0.00025, rel=1e-3)


@pytest.mark.parametrize("legacy,triton,reason", [
    (np.array([1, 2], np.int32), np.array([1, 3], np.int32), "values"),
    (np.array([1, 2], np.int32), np.array([1, 2], np.int64), "dtype int32 vs int64"),
    (np.array([[1, 2]], np.int32), np.array([1, 2], np.int32), "shape [1, 2] vs [2]"),
    (np.array([b"a", b"b"], object), np.array([b"a", b"c"], object), "values"),
    (np.array([True]), np.array([False]), "values"),
])
def test_exact_kinds(legacy, triton, reason):
    c = compare(ans(t=legacy), ans(t=triton), 1.0, 1.0)  # tolerances never apply to these
    assert c.outcome == "mismatch" and c.outputs["t"].reason == reason


def test_missing_outputs_both_ways():
    c = compare(ans(y=np.zeros(1, F32), z=np.zeros(1, F32)), ans(y=np.zeros(1, F32), w=np.zeros(1, F32)), 0, 0)
    assert c.outputs["z"].reason == "missing in triton" and c.outputs["w"].reason == "missing in legacy"


def test_errors_statuses_and_words():
    ok = ans(y=np.zeros(1, F32))
    assert compare(failure("400", "bad"), ok, 0, 0).outcome == "legacy_error"
    assert compare(ok, failure("503", "down"), 0, 0).outcome == "triton_error"
    assert compare(failure("400", "bad"), failure("400", "bad"), 0, 0).outcome == "match"
    assert compare(failure("400", "bad"), failure("400", "Bad"), 0, 0).outcome == "mismatch"
    assert compare(failure("400", "bad"), failure("404", "bad"), 0, 0).outcome == "mismatch"


def test_format_differences_are_reported_apart():
    a = Answer(outputs={"y": np.array([0.5], F32), "z": np.array([1], np.int64)}, body=b'{"y":[0.5],"z":[1]}',
               fields=("y", "z"))
    b = Answer(outputs={"y": np.array([0.5], F32), "z": np.array([1], np.int64)}, body=b'{"z":[1],"y":[0.5]}',
               fields=("z", "y"))
    c = Answer(outputs={"y": np.array([0.5], F32), "z": np.array([1], np.int64)}, body=b'{"y":[5e-1],"z":[1]}',
               fields=("y", "z"))
    assert compare(a, b, 0, 0).outcome == "match" and compare(a, b, 0, 0).format == "field_order"
    assert compare(a, c, 0, 0).format == "spelling"
    assert compare(a, a, 0, 0).format == ""


def test_llm_text_only_when_greedy():
    g = dict(tokens=(3, 5), greedy=True)
    assert compare(Answer(text="ab", **g), Answer(text="ab", **g), 0, 0).outcome == "match"
    assert compare(Answer(text="ab", **g), Answer(text="ac", **g), 0, 0).outcome == "mismatch"
    assert compare(Answer(text="ab", **g), Answer(text="ab", tokens=(3, 6)), 0, 0).outcome == "mismatch"
    s = dict(tokens=(3, 5), greedy=False)
    assert compare(Answer(text="ab", **s), Answer(text="zz", tokens=(3, 9), greedy=False), 0, 0).outcome == "skipped"
    assert compare(Answer(text="ab", **s), failure("500", "x"), 0, 0).outcome == "triton_error"


# -- routing ---------------------------------------------------------------------------------------
def legacy(**kw) -> LegacySettings:
    return LegacySettings.model_validate({"http": "http://127.0.0.1:1", **kw})


def test_routes_per_model_with_the_dialect_default():
    r = Routes("tfserving", legacy(route="shadow", models={"a": {"route": "legacy"}, "b": {"route": "triton"}}))
    assert r.choose("a")[:3] == ("legacy", False, "legacy")
    assert r.choose("b")[:3] == ("triton", False, "triton")
    assert r.choose("other")[:3] == ("legacy", True, "shadow")


def test_canary_share_and_stickiness():
    r = Routes("tfserving", legacy(route="canary", canary_percent=30, sticky="header:x-user"))
    draws = [r.choose("m", {"x-user": f"user{i}"}.get).answer for i in range(2000)]
    assert 0.25 < draws.count("triton") / 2000 < 0.35
    same = {r.choose("m", {"x-user": "alice"}.get).answer for _ in range(50)}
    assert len(same) == 1
    by_client = Routes("t", legacy(route="canary", canary_percent=50, sticky="client"))
    assert len({by_client.choose("m", None, "10.0.0.7").answer for _ in range(50)}) == 1
    assert Routes("t", legacy(route="canary", canary_percent=0)).choose("m").answer == "legacy"
    assert Routes("t", legacy(route="canary", canary_percent=100)).choose("m").answer == "triton"
    rev = Routes("t", legacy(route="canary", canary_percent=100, reverse_shadow=True)).choose("m")
    assert rev.shadow and rev.background == "legacy"
    assert metadata_getter([("x-user", "a")])("X-User") == "a"


def test_settings_refuse_nonsense():
    with pytest.raises(ValueError):
        LegacySettings.model_validate({"route": "shadow"})  # no legacy server
    with pytest.raises(ValueError):
        legacy(sticky="cookie")
    with pytest.raises(ValueError):
        legacy(route="canary", canary_percent=101)
    with pytest.raises(ValueError):
        legacy(models={"m": {"route": "mirror"}})


def test_routes_reload_from_the_file_and_keep_them_on_a_bad_file(tmp_path, monkeypatch):
    from gateway.process import filewatch

    monkeypatch.setattr(filewatch, "INTERVAL_S", 0.0)
    f = tmp_path / "gateway.yaml"
    f.write_text("dialects:\n  tfserving:\n    legacy: {http: 'http://127.0.0.1:1', route: legacy}\n")
    r = Routes("tfserving", legacy(route="legacy"), str(f))
    r._watch.interval = 0.0
    assert r.choose("m").route == "legacy"
    time.sleep(0.01)
    f.write_text("dialects:\n  tfserving:\n    legacy: {http: 'http://127.0.0.1:1', route: shadow,"
                 " models: {m: {route: canary, canary_percent: 100}}}\n")
    assert r.choose("m").route == "canary" and r.choose("n").route == "shadow"
    time.sleep(0.01)
    f.write_text("dialects:\n  tfserving:\n    legacy: {http: 'http://127.0.0.1:1', route: sideways}\n")
    assert r.choose("n").route == "shadow"  # kept
    time.sleep(0.01)
    f.write_text("dialects:\n  tfserving:\n    legacy: {http: 'http://10.0.0.1:2', route: triton}\n")
    assert r.choose("n").route == "triton" and r.legacy.http == "http://127.0.0.1:1"  # address: at restart


# -- shadow ----------------------------------------------------------------------------------------
def counts(dialect: str, model: str) -> dict[str, float]:
    out = {}
    for fam in metrics.REGISTRY.collect():
        for s in fam.samples:
            if s.name == "gateway_migration_total" and s.labels["dialect"] == dialect and s.labels["model"] == model:
                out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0) + s.value
    return out


def test_shadow_never_waits_is_bounded_and_has_its_own_deadline(tmp_path):
    async def main():
        cut = Cutover("unit", legacy(route="shadow", shadow_timeout_s=0.2, shadow_concurrency=2,
                                     mismatches={"path": str(tmp_path)}))
        gate = asyncio.Event()

        async def slow():
            await gate.wait()
            return ans(y=np.ones(1, F32))

        d = cut.choose("slow")
        t0 = time.monotonic()
        p1 = cut.shadow.start("slow", d, b"r1", slow)
        p2 = cut.shadow.start("slow", d, b"r2", slow)
        p3 = cut.shadow.start("slow", d, b"r3", slow)  # over the bound: dropped
        assert time.monotonic() - t0 < 0.05 and p1 and p2 and p3 is None
        p1.settle(ans(y=np.ones(1, F32)))
        p2.settle(lambda: ans(y=np.ones(1, F32)))
        await asyncio.sleep(0.35)  # the deadline passed: triton_error, and the slots are free again
        gate.set()
        p4 = cut.shadow.start("slow", d, b"r4", slow)
        p4.settle(ans(y=np.ones(1, F32)))
        await cut.close()

        async def differ():
            return ans(y=np.array([2.0], F32))

        p5 = cut.shadow.start("diff", cut.choose("diff"), b"r5", differ)
        p5.settle(ans(y=np.array([1.0], F32)))
        await cut.close()

    asyncio.run(main())
    assert counts("unit", "slow") == {"dropped": 1, "triton_error": 2, "match": 1}
    assert counts("unit", "diff") == {"mismatch": 1}
    lines = read(tmp_path)
    assert [(x["model"], x["outcome"]) for x in lines] == [("slow", "triton_error"), ("slow", "triton_error"),
                                                           ("diff", "mismatch")]
    assert lines[2]["outputs"]["y"]["max_abs"] == 1.0 and "legacy_b64" not in lines[2]
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'gateway_migration_max_error{dialect="unit",kind="abs",model="diff",output="y"} 1.0' in text


def test_equal_wires_match_without_decoding_and_unequal_ones_are_decoded():
    from gateway.cutover import Wire

    def never():
        raise AssertionError("decoded")

    async def main():
        cut = Cutover("wire", legacy(route="shadow"))
        d = cut.choose("m")

        async def same():
            return Wire("200", b'{"y":[1.0]}', never)

        cut.shadow.start("m", d, b"r", same).settle(Wire("200", b'{"y":[1.0]}', never))

        async def other():
            return Wire("200", b'{"y":[1.5]}', lambda: ans(y=np.array([1.5])))

        cut.shadow.start("m", d, b"r", other).settle(Wire("200", b'{"y":[1.0]}', lambda: ans(y=np.array([1.0]))))
        await cut.close()

    asyncio.run(main())
    assert counts("wire", "m") == {"match": 1, "mismatch": 1}


def test_no_legacy_section_no_cutover():
    assert open_cutover("tfserving", None) is None


# -- the mismatch file -----------------------------------------------------------------------------
def test_recorder_keeps_the_first_n_per_model_and_rotates(tmp_path):
    from gateway.cutover.compare import Comparison

    rec = Recorder("d", MismatchLog(path=str(tmp_path), per_model=3, max_bytes=4096, record_payloads=True))
    big = b"x" * 600
    written = [rec.record("m", "shadow", Comparison("mismatch"), big, failure("400", "a", big), None) for _ in range(5)]
    assert written == [True, True, True, False, False]
    assert rec.record("n", "shadow", Comparison("mismatch"), b"", None, None)
    again = Recorder("d", MismatchLog(path=str(tmp_path), per_model=3, max_bytes=4096))  # another worker
    assert not again.record("m", "shadow", Comparison("mismatch"), b"", None, None)
    assert (tmp_path / "d-mismatches.jsonl.1").exists()  # rotated past 4096 bytes
    lines = read(tmp_path)
    assert [x["model"] for x in lines] == ["m", "m", "m", "n"] and lines[0]["request_b64"]


# -- report ----------------------------------------------------------------------------------------
def test_report_reads_the_figures_and_gives_a_verdict():
    text = "\n".join([
        '# TYPE gateway_migration_total counter',
        'gateway_migration_total{dialect="tfserving",model="half",route="shadow",outcome="match"} 40.0',
        'gateway_migration_total{dialect="tfserving",model="hp2",route="shadow",outcome="match"} 3.0',
        'gateway_migration_total{dialect="tfserving",model="hp2",route="shadow",outcome="mismatch"} 5.0',
        'gateway_migration_total{dialect="tfserving",model="hp2",route="shadow",outcome="legacy_error"} 1.0',
        '# TYPE gateway_migration_max_error gauge',
        'gateway_migration_max_error{dialect="tfserving",model="hp2",output="y",kind="abs"} 0.001',
        'gateway_migration_max_error{dialect="tfserving",model="hp2",output="y",kind="rel"} 0.0004', ""])
    models = parse(text)
    half, hp2 = models[("tfserving", "half")], models[("tfserving", "hp2")]
    assert half.compared == 40 and half.agreement == 1.0 and half.verdict(40) == "ready to cut over"
    assert half.verdict(41) == "not ready: 40 compared, 41 needed"
    assert hp2.compared == 9 and hp2.verdict(1) == "not ready: 5 mismatch, 1 legacy_error"
    assert hp2.worst() == ("y", 0.001, 0.0004)
    out = render(sorted(models.values(), key=lambda m: m.model), 10)
    assert "100.00 %" in out and "33.33 %" in out and "y: abs 0.001" in out
    json.dumps([m.counts for m in models.values()])


# -- the legacy HTTP client and gateway check ------------------------------------------------------
async def test_legacy_client_relays_bytes_and_headers_and_check_probes_it():
    from aiohttp import web

    from gateway.check import Report, _legacy
    from gateway.cutover.legacy_http import LegacyHttp
    from tests.support import free_port

    seen = {}

    async def handler(request):
        seen["headers"] = dict(request.headers)
        seen["body"] = await request.read()
        return web.Response(body=b"\x00raw\xff", status=418, headers={"X-Legacy": "1", "Content-Type": "app/x"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        conf = legacy(http=f"http://127.0.0.1:{port}", headers={"x-team": "ml"})
        client = LegacyHttp("t", conf)
        reply = await client.call("POST", "/v1/models/m:predict?x=1", [("Content-Type", "application/json"),
                                                                     ("Connection", "keep-alive"), ("X-Mine", "a")],
                                  b'{"instances": [1]}')
        await client.close()
        assert (reply.status, reply.body, reply.header("x-legacy"), reply.header("content-type")) == \
            (418, b"\x00raw\xff", "1", "app/x")
        assert seen["body"] == b'{"instances": [1]}' and seen["headers"]["X-Mine"] == "a"
        assert seen["headers"]["x-team"] == "ml" and "User-Agent" not in seen["headers"]
        report = Report("x")
        ok = await _legacy("tfserving", conf, report)
        assert ok["http_reachable"] and not report.findings
    finally:
        await runner.cleanup()
    down = await _legacy("tfserving", legacy(http=f"http://127.0.0.1:{free_port()}", route="shadow"), report)
    assert down["http_reachable"] is False and report.findings[0].level == "warning"


async def test_legacy_client_speaks_mtls(tmp_path):
    """``legacy.tls`` as upstream.tls: the legacy server's CA trusted, a client certificate presented."""
    import ssl

    import trustme
    from aiohttp import web

    from gateway.core.errors import GatewayError
    from gateway.cutover.legacy_http import LegacyHttp
    from tests.support import free_port

    ca = trustme.CA()
    server, client = ca.issue_cert("127.0.0.1"), ca.issue_cert("gateway.example")
    paths = {}
    for name, pem in (("ca", ca.cert_pem), ("cert", client.cert_chain_pems[0]), ("key", client.private_key_pem)):
        paths[name] = tmp_path / f"{name}.pem"
        pem.write_to_path(str(paths[name]))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_REQUIRED  # mTLS: no client certificate, no answer

    async def handler(request):
        peer = request.transport.get_extra_info("peercert")
        return web.Response(text=str(dict(x[0] for x in peer["subject"]).get("commonName", peer["subjectAltName"])))

    app = web.Application()
    app.router.add_get("/who", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    try:
        url = f"https://127.0.0.1:{port}"
        mtls = LegacyHttp("t", legacy(http=url, tls={"ca_file": str(paths["ca"]), "cert_file": str(paths["cert"]),
                                                      "key_file": str(paths["key"])}))
        reply = await mtls.call("GET", "/who", [], b"")
        await mtls.close()
        assert reply.status == 200 and b"gateway.example" in reply.body
        no_cert = LegacyHttp("t", legacy(http=url, tls={"ca_file": str(paths["ca"])}))
        with pytest.raises(GatewayError) as e:
            await no_cert.call("GET", "/who", [], b"")
        await no_cert.close()
        assert e.value.kind.value == "unavailable"
    finally:
        await runner.cleanup()


async def test_legacy_answer_over_its_bound_is_an_error_not_a_buffer():
    from aiohttp import web

    from gateway.core.errors import GatewayError
    from gateway.cutover.legacy_http import LegacyHttp
    from tests.support import free_port

    async def handler(request):
        resp = web.StreamResponse()  # chunked: no length to refuse early
        await resp.prepare(request)
        for _ in range(64):
            await resp.write(b"x" * 1024)
        return resp

    app = web.Application()
    app.router.add_get("/big", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        client = LegacyHttp("t", legacy(http=f"http://127.0.0.1:{port}", max_answer_bytes=16 * 1024))
        with pytest.raises(GatewayError) as e:
            await client.call("GET", "/big", [], b"")
        assert "max_answer_bytes" in e.value.message
        whole = LegacyHttp("t", legacy(http=f"http://127.0.0.1:{port}"))
        assert len((await whole.call("GET", "/big", [], b"")).body) == 64 * 1024
        await client.close()
        await whole.close()
    finally:
        await runner.cleanup()


async def test_a_legacy_section_with_grpc_only_answers_http_with_a_clear_error():
    from gateway.core.errors import GatewayError
    from gateway.cutover import httprelay

    cut = Cutover("tfserving", LegacySettings.model_validate({"grpc": "127.0.0.1:1", "route": "legacy"}))

    class Req:
        method, path, query_string, body = "POST", "/v1/models/m:predict", "", b"{}"
        headers = {}

    with pytest.raises(GatewayError) as e:
        await httprelay.forward(cut, Req())
    assert e.value.kind.value == "unavailable" and "legacy.http is not set" in e.value.message
    await cut.close()


def test_a_stream_past_its_bound_is_skipped_and_says_so():
    from gateway.cutover.grpcroute import MAX_STREAM_MESSAGES, GrpcCutover

    cut = GrpcCutover("grps", None, None, None, lambda _m, _d: ans(y=[1]), None, None)
    long, short = cut.stream_answer("PredictStreaming", None), cut.stream_answer("PredictStreaming", [b"x"])
    for legacy, triton in ((long, short), (short, long), (long, long)):
        got = compare(legacy, triton, 1e-5, 1e-5)
        assert got.outcome == "skipped" and "sampled" not in got.note
        assert got.note == f"stream longer than {MAX_STREAM_MESSAGES} messages: not compared"
    # an error on the other side is still that side's error
    assert compare(long, failure("INTERNAL", "boom"), 1e-5, 1e-5).outcome == "triton_error"


def test_protobuf_answers_have_no_field_order_or_spelling_json_ones_do():
    """Two PredictResponses with the same outputs, the ``outputs`` map's entries written in either
    order (upb writes a map in an order of each process's own): a plain match, no format counted.
    A layout a client can see (``float_val`` against ``tensor_content``) is still reported apart."""
    from gateway._proto.tensorflow_serving.apis import predict_pb2
    from gateway.dialects.tfserving.cutover_grpc import answer

    def entry(name: str, values, packed: bool = False) -> bytes:
        one = predict_pb2.PredictResponse()
        one.outputs[name].dtype = 1  # DT_FLOAT
        one.outputs[name].tensor_shape.dim.add(size=len(values))
        if packed:
            one.outputs[name].tensor_content = np.asarray(values, dtype=F32).tobytes()
        else:
            one.outputs[name].float_val.extend(values)
        return one.SerializeToString()

    spec = predict_pb2.PredictResponse(model_spec={"name": "same"}).SerializeToString()
    y, y2 = entry("y", [2.5, 3.0]), entry("y2", [3.5, 4.0])
    first, second = answer("Predict", spec + y + y2), answer("Predict", spec + y2 + y)
    first.body, second.body = spec + y + y2, spec + y2 + y  # as the grpc route sets them
    assert first.body != second.body
    got = compare(first, second, 1e-5, 1e-5)
    assert (got.outcome, got.format) == ("match", "")
    packed = answer("Predict", spec + entry("y", [2.5, 3.0], packed=True) + y2)
    packed.body = spec + entry("y", [2.5, 3.0], packed=True) + y2
    assert (compare(first, packed, 1e-5, 1e-5).outcome, compare(first, packed, 1e-5, 1e-5).format) == ("match", "layout")
    # JSON answers keep both notions
    a = Answer(outputs={"y": np.array([1.0])}, body=b'{"y": [1.0]}', fields=("y",))
    b = Answer(outputs={"y": np.array([1.0])}, body=b'{"y": [1.00]}', fields=("y",))
    assert compare(a, b, 0, 0).format == "spelling"
