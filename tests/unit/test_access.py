"""API keys per listener: the keys themselves, their settings, and a live worker with keys on every
listener answering 401 / UNAUTHENTICATED in each dialect's envelope (real clients where cheap: the
openai SDK and the TGI client), probes left open, the gateway's key never forwarded to Triton."""

from __future__ import annotations

import hmac

import aiohttp
import grpc
import openai
import orjson
import pytest
import text_generation
from prometheus_client import REGISTRY

from gateway import access, config
from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway._proto.tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc
from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialects import LISTENERS
from gateway.settings import SettingsError
from tests.fakes import fake_triton
from tests.support import free_port, running_worker, worker_settings

KEY, OTHER = "k-3f9a0c7e5b2d4e61", "k-second-key-0042"
MESSAGE = access.UNAUTHENTICATED_MESSAGE


# -- the keys -------------------------------------------------------------------------------------
def test_bearer_is_parsed_case_insensitively_and_nothing_else_is_a_key():
    assert access.bearer(f"Bearer {KEY}") == KEY
    assert access.bearer(f"bearer   {KEY} ") == KEY
    assert access.bearer(f"Bearer {KEY}".encode()) == KEY
    for value in (None, "", KEY, f"Basic {KEY}", "Bearer", "Bearer  "):
        assert access.bearer(value) is None, value


def test_only_a_configured_key_passes():
    keys = access.ApiKeys([KEY, OTHER])
    keys.check(f"Bearer {KEY}")
    keys.check(f"Bearer {OTHER}")
    for value in (None, "", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", KEY, f"Basic {KEY}", "Bearer "):
        with pytest.raises(GatewayError) as err:
            keys.check(value)
        assert err.value.kind is ErrorKind.UNAUTHENTICATED and err.value.message == MESSAGE
    keys.check_metadata((("x-request-id", "1"), ("authorization", f"Bearer {OTHER}")))
    with pytest.raises(GatewayError):
        keys.check_metadata((("x-api-key", KEY),))


@pytest.mark.parametrize("presented", [KEY, "k-2", "k-3", "wrong"])
def test_every_key_is_compared_whichever_matches(monkeypatch, presented):
    """No early exit: as many constant-time comparisons for the first key as for none."""
    calls, compare = [], hmac.compare_digest

    def counting(a, b):
        calls.append((len(a), len(b)))
        return compare(a, b)

    monkeypatch.setattr(access.hmac, "compare_digest", counting)
    keys = access.ApiKeys([KEY, "k-2", "k-3"])
    assert keys.valid(presented) is (presented != "wrong")
    assert calls == [(32, 32)] * 3  # digests: equal lengths, so the key's length does not show either


def test_no_keys_is_not_a_keyring():
    with pytest.raises(ValueError):
        access.ApiKeys([])


# -- settings --------------------------------------------------------------------------------------
def test_keys_from_the_file_the_file_and_the_environment(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(f"# the LLM clients' keys\n{KEY}\n\n  {OTHER}  \n")
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(f"listeners:\n  mindie_http:\n    api_keys_file: {keys}\n    api_keys: [inline-key]\n")
    s = config.load(cfg, env={"GATEWAY__LISTENERS__GRPS_GRPC__API_KEYS": "[env-key]"})
    got = [k.get_secret_value() for k in s.listener("mindie_http").api_keys]
    assert got == ["inline-key", KEY, OTHER]
    assert [k.get_secret_value() for k in s.listener("grps_grpc").api_keys] == ["env-key"]
    assert s.listener("tfserving_rest").api_keys == () and access.listener_keys(s.listener("tfserving_rest")) is None
    assert KEY not in repr(s)  # settings may be logged: keys are SecretStr


@pytest.mark.parametrize("content, message", [(None, "cannot read"), ("# only a comment\n\n", "holds no key")])
def test_a_keys_file_that_gives_no_key_stops_the_gateway(tmp_path, content, message):
    keys = tmp_path / "keys"
    if content is not None:
        keys.write_text(content)
    with pytest.raises(SettingsError, match=f"listeners.admin_http.api_keys_file: .*{message}"):
        config.load(None, env={"GATEWAY__LISTENERS__ADMIN_HTTP__API_KEYS_FILE": str(keys)})


def test_key_and_tls_settings_are_checked():
    with pytest.raises(SettingsError, match="api_keys"):
        config.load(None, env={"GATEWAY__LISTENERS__ADMIN_HTTP__API_KEYS": "just-a-string"})
    with pytest.raises(SettingsError, match="api_keys.0"):
        config.load(None, env={"GATEWAY__LISTENERS__ADMIN_HTTP__API_KEYS": '[""]'})
    with pytest.raises(SettingsError, match="cert_file and key_file go together"):
        config.load(None, env={"GATEWAY__UPSTREAM__TLS": "{cert_file: c.pem}"})
    with pytest.raises(SettingsError, match="key_file"):
        config.load(None, env={"GATEWAY__LISTENERS__ADMIN_HTTP__TLS": "{cert_file: c.pem}"})


# -- a live worker with keys on every listener -------------------------------------------------------
class RecordingTriton(grpc.GenericRpcHandler):
    """Answers every KServe V2 RPC with an empty message and keeps the metadata it was sent."""

    def __init__(self):
        self.metadata: list[dict] = []

    def service(self, details):
        async def answer(_request: bytes, context):
            if not details.method.endswith("/ServerMetadata"):  # not the worker's start-up version read
                self.metadata.append(dict(context.invocation_metadata()))
            return b""

        return grpc.unary_unary_rpc_method_handler(answer)


@pytest.fixture
async def keyed():
    triton = RecordingTriton()
    ports = {name: free_port() for name in LISTENERS}
    keys = {f"LISTENERS__{name.upper()}__API_KEYS": f"[{OTHER}, {KEY}]" for name in LISTENERS}
    async with fake_triton(triton) as (_, target), running_worker(ports, target, **keys), \
            aiohttp.ClientSession() as http:
        yield ports, http, triton


def _count(listener: str, outcome: str) -> float:
    return sum(s.value for m in REGISTRY.collect() if m.name == "gateway_requests" for s in m.samples
               if s.name.endswith("_total") and s.labels["listener"] == listener and s.labels["outcome"] == outcome)


BEARER = {"Authorization": f"Bearer {KEY}"}
WRONG = {"Authorization": f"Bearer {KEY}-wrong"}


async def test_http_listeners_answer_401_in_their_envelope(keyed):
    ports, http, _ = keyed
    before = _count("tfserving_rest", "unauthenticated")
    tf = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models"
    for headers in ({}, WRONG, {"Authorization": KEY}, {"x-api-key": KEY}):
        async with http.get(tf, headers=headers) as r:
            assert r.status == 401 and r.headers["www-authenticate"] == "Bearer" and r.headers["x-request-id"]
            assert orjson.loads(await r.read()) == {"error": MESSAGE}
    async with http.get(tf, headers=BEARER) as r:  # past the key: TF Serving's own answer
        assert r.status == 400 and orjson.loads(await r.read()) == {"error": "Missing model name in request."}
    assert _count("tfserving_rest", "unauthenticated") == before + 4
    # sanic's own refusals (no such route) do not tell an unauthenticated client which routes exist
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/no/such/route") as r:
        assert r.status == 401 and orjson.loads(await r.read()) == {"error": MESSAGE}
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/no/such/route", headers=BEARER) as r:
        assert r.status == 404

    grps = f"http://127.0.0.1:{ports['grps_http']}/grps/v1/health/live"
    async with http.post(grps, json={}) as r:
        assert r.status == 401
        assert orjson.loads(await r.read())["status"] == {"code": 401, "msg": MESSAGE, "status": "FAILURE"}
    async with http.post(grps, json={}, headers=BEARER) as r:
        assert r.status == 200 and orjson.loads(await r.read())["status"]["status"] == "SUCCESS"

    mindie = f"http://127.0.0.1:{ports['mindie_http']}"
    async with http.post(f"{mindie}/generate", json={"inputs": "hi"}) as r:
        assert r.status == 401
        assert orjson.loads(await r.read()) == {"error": MESSAGE, "error_type": "Unauthorized"}
    async with http.post(f"{mindie}/v1/chat/completions", json={"messages": []}, headers=WRONG) as r:
        assert r.status == 401
        assert orjson.loads(await r.read()) == {"error": {"message": MESSAGE, "type": "invalid_request_error",
                                                          "param": None, "code": "invalid_api_key"}}


async def test_admin_probes_stay_open_and_metrics_ask_for_a_key(keyed):
    ports, http, _ = keyed
    admin = f"http://127.0.0.1:{ports['admin_http']}"
    async with http.get(f"{admin}/live") as r:
        assert r.status == 200
    async with http.get(f"{admin}/health") as r:
        assert r.status in (200, 503) and "status" in orjson.loads(await r.read())
    async with http.get(f"{admin}/metrics") as r:
        assert r.status == 401 and orjson.loads(await r.read()) == {"error": MESSAGE}
    async with http.get(f"{admin}/metrics", headers=BEARER) as r:
        assert r.status == 200 and b"gateway_requests_total" in await r.read()


async def test_real_llm_clients_see_an_authentication_error(keyed):
    ports, _, _ = keyed
    base = f"http://127.0.0.1:{ports['mindie_http']}"
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="not-the-key", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as err:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
        assert err.value.body["message"] == MESSAGE
    tgi = text_generation.AsyncClient(base, headers={"Authorization": "Bearer nope"})
    with pytest.raises(text_generation.errors.UnknownError, match="API key"):
        await tgi.generate("hi")


async def test_grpc_listeners_answer_unauthenticated(keyed):
    ports, _, triton = keyed
    before = _count("grps_grpc", "unauthenticated")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grps_grpc']}") as ch:
        stub = grps_pb2_grpc.GrpsServiceStub(ch)
        for md in ((), (("authorization", f"Bearer {KEY}x"),)):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.CheckLiveness(grps_pb2.GrpsMessage(), metadata=md)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and err.value.details() == MESSAGE
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [m async for m in stub.PredictStreaming(grps_pb2.GrpsMessage(str_data="x"))]
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = await stub.CheckLiveness(grps_pb2.GrpsMessage(), metadata=(("authorization", f"Bearer {KEY}"),))
        assert ok.status.status == grps_pb2.Status.SUCCESS
    assert _count("grps_grpc", "unauthenticated") == before + 3

    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['tfserving_grpc']}") as ch:
        stub = model_service_pb2_grpc.ModelServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetModelStatus(get_model_status_pb2.GetModelStatusRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    method = "/inference.GRPCInferenceService/ServerLive"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['v2_grpc']}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ch.unary_unary(method)(b"")
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert triton.metadata == []  # refused before Triton
        md = (("authorization", f"Bearer {KEY}"), ("x-trace", "t1"))
        assert await ch.unary_unary(method)(b"", metadata=md) == b""
    assert triton.metadata[-1]["x-trace"] == "t1"
    assert "authorization" not in triton.metadata[-1]  # the gateway's key is not Triton's


async def test_a_listener_without_keys_stays_open():
    ports = {"tfserving_rest": free_port(), "grps_http": free_port()}
    async with fake_triton() as (_, target), \
            running_worker(ports, target, LISTENERS__GRPS_HTTP__API_KEYS=f"[{KEY}]"), aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models") as r:
            assert r.status == 400
        async with http.post(f"http://127.0.0.1:{ports['grps_http']}/grps/v1/health/live", json={}) as r:
            assert r.status == 401


def test_a_keys_file_is_read_again_when_it_changes_and_a_bad_one_keeps_the_keys(tmp_path, caplog):
    path = tmp_path / "keys"
    path.write_text("file-1\n")
    keys = access.ReloadingKeys("mindie_http", ["inline"], str(path))
    keys._watch.interval = 0  # look at every check (the listener looks at most every 0.25 s)
    assert keys.valid("inline") and keys.valid("file-1") and not keys.valid("file-2")
    path.write_text("# rotated\nfile-2\n")
    assert keys.valid("file-2") and not keys.valid("file-1") and keys.valid("inline")
    path.write_text("")  # emptied (or half-written): the listener stays protected by what it had
    assert keys.valid("file-2") and not keys.valid("")
    assert "holds no key; the keys read before stay" in caplog.text
    path.unlink()
    assert keys.valid("file-2")
    assert "cannot read" in caplog.text


def test_listener_keys_reload_only_with_a_keys_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text("k\n")
    s = worker_settings({"mindie_http": 1025, "tfserving_rest": 8501}, "127.0.0.1:1",
                        LISTENERS__MINDIE_HTTP__API_KEYS_FILE=str(path), LISTENERS__TFSERVING_REST__API_KEYS='["a"]')
    assert isinstance(access.listener_keys(s.listener("mindie_http")), access.ReloadingKeys)
    inline = access.listener_keys(s.listener("tfserving_rest"))
    assert type(inline) is access.ApiKeys and inline.valid("a")
