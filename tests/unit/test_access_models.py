"""Which Triton models each dialect may reach (``dialects.<name>.triton_models``): one restricted view
of the Upstream for the translated dialects, and the V2 passthrough's raw messages checked by name."""

from __future__ import annotations

import aiohttp
import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from gateway import access, config
from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import InferRequest, InferResponse, Tensor
from gateway.settings import SettingsError
from tests.fakes import FakeUpstream, fake_triton, text_response, trtllm_meta
from tests.support import free_port, running_worker

SVC = "/inference.GRPCInferenceService/"


def _request(model: str) -> InferRequest:
    return InferRequest(model, [Tensor("x", np.zeros(1, np.float32), "FP32")])


async def test_the_scope_answers_not_found_for_other_models_and_filters_the_index():
    fake = FakeUpstream([text_response("hi")], metas=[trtllm_meta("open_llm"), trtllm_meta("private_llm")],
                        infer=lambda req: InferResponse(req.model, "1", []))
    scope = access.scoped(fake, ["open_llm"])
    assert (await scope.infer(_request("open_llm"))).model == "open_llm"
    assert (await scope.model_metadata("open_llm")).name == "open_llm"
    assert [r async for r in scope.stream(_request("open_llm"))][0].outputs
    assert [e.name for e in await scope.repository_index()] == ["open_llm"]
    assert await scope.model_ready("private_llm") is False and await scope.model_ready("open_llm") is True
    calls = len(fake.requests)
    for attempt in (scope.infer(_request("private_llm")), scope.model_metadata("private_llm"),
                    scope.model_config("private_llm"), anext(scope.stream(_request("private_llm")))):
        with pytest.raises(GatewayError) as err:
            await attempt
        assert err.value.kind is ErrorKind.NOT_FOUND
        assert err.value.message == "Request for unknown model: 'private_llm' is not found"
    assert len(fake.requests) == calls  # refused before the upstream
    assert await scope.server_ready() is True  # the rest is delegated
    assert access.scoped(fake, []) is fake  # empty list: every model


def test_every_dialect_but_admin_takes_a_model_list():
    s = config.load(None, env={"GATEWAY__DIALECTS__MINDIE__TRITON_MODELS": "[tiny_llm]",
                                 "GATEWAY__DIALECTS__V2__TRITON_MODELS": "[a, b]"})
    assert s.dialect("mindie").triton_models == ("tiny_llm",) and s.dialect("v2").triton_models == ("a", "b")
    assert s.dialect("tfserving").triton_models == () and s.dialect("grps").default_model == "grps_echo-1"
    with pytest.raises(SettingsError, match="dialects.admin.triton_models"):
        config.load(None, env={"GATEWAY__DIALECTS__ADMIN__TRITON_MODELS": "[a]"})
    with pytest.raises(SettingsError, match="triton_models"):
        config.load(None, env={"GATEWAY__DIALECTS__GRPS__TRITON_MODELS": "a"})


async def test_a_translated_dialect_sees_only_its_models():
    fake = FakeUpstream(metas=[trtllm_meta("open_llm"), trtllm_meta("private_llm")])
    ports = {"mindie_http": free_port()}
    async with running_worker(ports, "127.0.0.1:1", upstream_factory=lambda _s: fake,
                              DIALECTS__MINDIE__TRITON_MODELS="[open_llm]"):
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{ports['mindie_http']}"
            async with http.get(f"{base}/v1/models") as r:
                assert [m["id"] for m in (await r.json(content_type=None))["data"]] == ["open_llm"]
            async with http.get(f"{base}/v1/models/private_llm") as r:
                assert r.status == 404
            async with http.post(f"{base}/v2/models/private_llm/generate", json={"text_input": "hi"}) as r:
                assert r.status == 404 and (await r.json())["error_type"] == "NotFoundError"
        assert all(req.model != "private_llm" for req, _ in fake.requests)


# -- the V2 passthrough ----------------------------------------------------------------------------------
class ListingTriton(grpc.GenericRpcHandler):
    def __init__(self):
        self.calls: list[str] = []

    def service(self, details):
        name = details.method.rsplit("/", 1)[1]

        async def unary(request: bytes, _context):
            if name != "ServerMetadata":  # not the worker's start-up version read (gateway/upstream/cancel.py)
                self.calls.append(name)
            if name == "RepositoryIndex":
                return service_pb2.RepositoryIndexResponse(models=[
                    service_pb2.RepositoryIndexResponse.ModelIndex(name=n, state="READY") for n in ("a", "b", "c")
                ]).SerializeToString()
            if name == "ModelStatistics":
                return service_pb2.ModelStatisticsResponse(model_stats=[
                    service_pb2.ModelStatistics(name=n) for n in ("a", "c")]).SerializeToString()
            return b""

        async def stream(request_iterator, _context):
            async for item in request_iterator:
                self.calls.append(name)
                yield item

        if name == "ModelStreamInfer":
            return grpc.stream_stream_rpc_method_handler(stream)
        return grpc.unary_unary_rpc_method_handler(unary)


@pytest.fixture
async def v2_scoped():
    fake = ListingTriton()
    port = free_port()
    async with fake_triton(fake) as (_, target), \
            running_worker({"v2_grpc": port}, target, DIALECTS__V2__TRITON_MODELS="[a]",
                           DIALECTS__V2__CONTROL_PLANE="true"), \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield fake, channel


def _infer(model: str) -> bytes:
    return service_pb2.ModelInferRequest(model_name=model).SerializeToString()


async def test_v2_requests_naming_another_model_are_not_found_before_triton(v2_scoped):
    fake, channel = v2_scoped
    assert await channel.unary_unary(SVC + "ModelInfer")(_infer("a")) == b""
    for method, request in (("ModelInfer", _infer("b")), ("ModelInfer", b""),
                            ("ModelMetadata", service_pb2.ModelMetadataRequest(name="c").SerializeToString()),
                            ("RepositoryModelLoad",
                             service_pb2.RepositoryModelLoadRequest(model_name="b").SerializeToString())):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await channel.unary_unary(SVC + method)(request)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND, method
        assert "Request for unknown model" in err.value.details()
    assert fake.calls == ["ModelInfer"]


async def test_v2_listings_show_only_the_allowed_models(v2_scoped):
    _, channel = v2_scoped
    raw = await channel.unary_unary(SVC + "RepositoryIndex")(b"")
    assert [m.name for m in service_pb2.RepositoryIndexResponse.FromString(raw).models] == ["a"]
    raw = await channel.unary_unary(SVC + "ModelStatistics")(b"")  # every model's statistics
    assert [m.name for m in service_pb2.ModelStatisticsResponse.FromString(raw).model_stats] == ["a"]


async def test_a_v2_stream_answers_another_model_in_the_stream_and_goes_on(v2_scoped):
    """As Triton does for a model it does not have: an in-stream error with the request's id; the stream
    stays open and the refused message never reaches Triton."""
    fake, channel = v2_scoped
    call = channel.stream_stream(SVC + "ModelStreamInfer")()
    await call.write(_infer("a"))
    assert await call.read() == _infer("a")
    await call.write(service_pb2.ModelInferRequest(model_name="b", id="req-7").SerializeToString())
    answer = service_pb2.ModelStreamInferResponse.FromString(await call.read())
    assert answer.error_message == "Request for unknown model: 'b' is not found"
    assert answer.infer_response.id == "req-7"
    await call.write(_infer("a"))
    assert await call.read() == _infer("a")
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
    assert fake.calls == ["ModelStreamInfer", "ModelStreamInfer"]  # the refused message never reached Triton
