"""Upstream targets for several Triton replicas: dns:/// and ipv4: lists, and the lb policy."""

import json

import pytest

from gateway import config, settings
from gateway.settings import SettingsError
from gateway.upstream.client import CHANNEL_OPTIONS, TritonUpstream, channel_options


@pytest.mark.parametrize(
    ("target", "addresses"),
    [
        ("triton:8001", [("triton", 8001)]),
        ("dns:///triton-headless:8001", [("triton-headless", 8001)]),
        ("dns://10.0.0.10/triton-headless.ns.svc.cluster.local:8001", [("triton-headless.ns.svc.cluster.local", 8001)]),
        ("dns:triton:8001", [("triton", 8001)]),
        ("ipv4:127.0.0.1:18001,127.0.0.1:18011", [("127.0.0.1", 18001), ("127.0.0.1", 18011)]),
        ("ipv6:[::1]:18001,[::1]:18011", [("[::1]", 18001), ("[::1]", 18011)]),
        ("unix:/run/triton.sock", []),
    ],
)
def test_every_address_of_a_target_is_parsed(target, addresses):
    assert settings.upstream_addresses(target) == addresses
    assert config.load(None, env={"GATEWAY__UPSTREAM__GRPC": target}).upstream.grpc == target


@pytest.mark.parametrize("target", ["dns:///triton", "ipv4:127.0.0.1:1,127.0.0.1", "triton"])
def test_targets_without_a_port_are_refused(target):
    with pytest.raises(SettingsError, match="not host:port"):
        config.load(None, env={"GATEWAY__UPSTREAM__GRPC": target})


@pytest.mark.parametrize("target", ["ipv4:127.0.0.1:18001,127.0.0.1:8001", "dns:///localhost:8001"])
def test_a_replica_list_that_includes_our_own_listener_is_refused(target):
    with pytest.raises(SettingsError, match="own v2_grpc listener"):
        config.load(None, env={"GATEWAY__UPSTREAM__GRPC": target})


def test_lb_policy_is_read_from_yaml_and_checked(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("upstream: {grpc: 'dns:///triton-headless:8001', lb_policy: round_robin}\n")
    assert config.load(f, env={}).upstream.lb_policy == "round_robin"
    assert config.load(None, env={}).upstream.lb_policy == "pick_first"
    f.write_text("upstream: {grpc: 'triton:8001', lb_policy: least_request}\n")
    with pytest.raises(SettingsError, match="lb_policy"):
        config.load(f, env={})


def test_the_channel_carries_the_policy_as_a_service_config():
    opts = dict(channel_options("round_robin"))
    assert json.loads(opts["grpc.service_config"]) == {"loadBalancingConfig": [{"round_robin": {}}]}
    assert all(opts[k] == v for k, v in CHANNEL_OPTIONS)  # message limits, keepalive, backoff kept
    assert dict(TritonUpstream("x:1").options)["grpc.service_config"] == '{"loadBalancingConfig": [{"pick_first": {}}]}'
    with pytest.raises(ValueError):
        channel_options("random")


def test_the_h2_channel_pings_as_the_grpc_channel_does():
    from gateway.upstream import factory

    upstream = factory.from_settings(config.load(None, env={"GATEWAY__UPSTREAM__GRPC": "127.0.0.1:1"}))
    opts = dict(CHANNEL_OPTIONS)
    assert upstream._h2.keepalive == (opts["grpc.keepalive_time_ms"] / 1000, opts["grpc.keepalive_timeout_ms"] / 1000,
                                      opts["grpc.keepalive_permit_without_calls"] == 1)
