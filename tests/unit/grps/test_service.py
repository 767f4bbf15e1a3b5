"""GrpsService over a scripted fake Upstream: streams that fail midway, readiness, monitoring."""

from __future__ import annotations

import numpy as np

from gateway.context import GatewayContext
from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import InferResponse, ModelMetadata, Tensor, TensorSpec
from gateway.dialects.grps import codec, config
from gateway.dialects.grps.service import GrpsService
from gateway.settings import Settings
from tests.fakes import FakeUpstream

META = ModelMetadata("gen", ("1",), "python", (TensorSpec("text", "BYTES", (1,)),),
                     (TensorSpec("text_out", "BYTES", (1,)),), decoupled=True)


def _text(s: str, final: bool = False) -> InferResponse:
    return InferResponse("gen", "1", [Tensor("text_out", np.array([s.encode()], dtype=object), "BYTES")], final=final)


def _upstream(fail_after: int | None = None, ready: bool = True) -> FakeUpstream:
    """Three text chunks; ``fail_after=n`` replaces the n-th with an upstream failure."""
    script = [_text(f"t{i}") for i in range(3)]
    if fail_after is not None:
        script = script[:fail_after] + [GatewayError(ErrorKind.UPSTREAM_FAILED, "model crashed")]
    return FakeUpstream(script, metas=[META], ready=ready)


def service(upstream, **cfg) -> GrpsService:
    return GrpsService(GatewayContext(Settings(), upstream), config.GrpsSettings.model_validate(cfg))


async def _collect(svc, msg):
    return [m async for m in svc.predict_stream(msg)]


async def test_stream_failing_midway_ends_with_one_failure_message():
    msgs = await _collect(service(_upstream(fail_after=2)), codec.GrpsMessage(model="gen-1", str_data="x"))
    assert [m.str_data for m in msgs[:2]] == ["t0", "t1"]
    assert len(msgs) == 3 and msgs[-1].status.status == codec.FAILURE and msgs[-1].status.code == 500
    assert "model crashed" in msgs[-1].status.msg


async def test_unary_predict_on_a_decoupled_model_merges_text():
    svc = service(_upstream())
    msg, _ = await svc.predict(codec.GrpsMessage(model="gen-1", str_data="x"))
    assert msg.str_data == "t0t1t2"
    assert svc.monitor.series("*qps[gen-1]") is not None


async def test_unknown_model_is_grps_500_and_not_tracked_per_model():
    # GRPS: Executor::Infer throws "Not found model: <name>" (executor.cc), answered as 500 with
    # that text (grps_handler.cc); its metadata is a 404
    svc = service(_upstream())
    msgs = await _collect(svc, codec.GrpsMessage(model="nope-1", str_data="x"))
    assert [(m.status.code, m.status.msg) for m in msgs] == [(500, "Not found model: nope-1")]
    assert svc.monitor.series("*qps[nope-1]") is None


async def test_readiness_needs_online_and_triton_ready():
    assert (await service(_upstream(), start_online=True).ready()).status.code == 200
    assert (await service(_upstream(ready=False), start_online=True).ready()).status.code == 503
    offline = service(_upstream())  # as GRPS (online_status = false): offline until Online
    assert (await offline.ready()).status.code == 503
    offline.set_online(True)
    assert (await offline.ready()).status.code == 200


async def test_model_metadata_answers_the_bare_name_and_not_found_as_grps():
    """grps_handler.cc ModelMetadata: inference.yml's models[].name (the bare name) is found; anything
    else, ``name-version`` and "" included, is status 404 ``Not Found``."""
    import yaml

    svc = service(_upstream(), models={"gen_model-1.0.0": {"triton_model": "gen", "triton_version": "1"}})
    for name in ("gen_model", "gen"):
        msg = await svc.model_metadata(codec.GrpsMessage(str_data=name))
        assert (msg.status.code, msg.status.msg, msg.status.status) == (200, "OK", codec.SUCCESS)
        assert yaml.safe_load(msg.str_data)["name"] == name
    assert yaml.safe_load((await svc.model_metadata(codec.GrpsMessage(str_data="gen_model"))).str_data)["version"] \
        == "1.0.0"
    for name in ("gen_model-1.0.0", "gen-1", "", "nope"):
        msg = await svc.model_metadata(codec.GrpsMessage(str_data=name))
        assert msg == codec.failure(404, "Not Found")


async def test_server_metadata_shows_the_configuration_only_when_enabled():
    import yaml

    rule = {"your_model-1.0.0": {"triton_model": "internal_model_name", "triton_version": "7"}}
    doc = yaml.safe_load((await service(_upstream(), models=rule).server_metadata()).str_data)
    assert doc == {"grps": {"version": "v1.1.0", "online": False}, "models": ["gen-1"]}
    assert "internal_model_name" not in yaml.safe_dump(doc)
    doc = yaml.safe_load((await service(_upstream(), models=rule, server_metadata_config=True)
                          .server_metadata()).str_data)
    assert doc["grps"]["gateway_config"]["models"]["your_model-1.0.0"]["triton_model"] == "internal_model_name"
