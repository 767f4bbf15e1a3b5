"""Reaches below a library's public API stay in their fence modules (gateway/observe/fastpaths.py),
and under the pinned versions every fast path is on."""

from __future__ import annotations

import ast
import logging

import pytest

from gateway.edge import sanicx
from gateway.observe import fastpaths, metrics
from tests.support import ROOT

# module prefix of a private surface -> the gateway modules allowed to import it
PRIVATE = {
    "grpc._cython": set(),
    "grpc.aio._": set(),
    "sanic.http": {"gateway/edge/sanicx.py", "gateway/edge/fastlane.py", "gateway/edge/httpbody.py"},
    "sanic.server": {"gateway/edge/sanicx.py", "gateway/edge/fastlane.py"},
    "sanic.touchup": {"gateway/edge/sanicx.py"},
    "sanic.application": {"gateway/edge/sanicx.py"},
    "sanic.compat": {"gateway/edge/sanicx.py", "gateway/edge/fastlane.py"},
    "sanic.headers": {"gateway/edge/sanicx.py", "gateway/edge/fastlane.py"},
    "sanic.helpers": {"gateway/edge/fastlane.py", "gateway/edge/httpbody.py"},
    "prometheus_client.metrics": set(),
    "grpc_health.v1.health._": set(),
}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def test_only_the_fence_modules_import_a_private_surface():
    found: dict[str, set[str]] = {prefix: set() for prefix in PRIVATE}
    for path in (ROOT / "gateway").rglob("*.py"):
        if "_proto" in path.parts:
            continue
        for name in _imports(path):
            for prefix in PRIVATE:
                if name.startswith(prefix):
                    found[prefix].add(str(path.relative_to(ROOT)))
    assert {p: found[p] - allowed for p, allowed in PRIVATE.items() if found[p] - allowed} == {}


def test_under_the_pinned_versions_every_fast_path_is_on():
    assert sanicx.FAST_LANE and sanicx.BODY_READER and sanicx.ANSWER_HEADERS
    assert metrics.BATCH_OBSERVE
    assert set(fastpaths.paths()) >= {"http_fast_lane", "http_body_reader", "http_answer_headers",
                                      "metrics_batch_observe"}
    assert all(not missing for missing in fastpaths.paths().values())


def test_a_missing_piece_turns_its_path_off_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(fastpaths, "_PATHS", dict(fastpaths._PATHS))
    assert fastpaths.declare("http_fast_lane", ["Http._safe_int"]) is False
    assert fastpaths.paths()["http_fast_lane"] == ("Http._safe_int",) and not fastpaths.paths()["metrics_batch_observe"]
    log = logging.getLogger("test.fastpaths")
    with caplog.at_level(logging.INFO, logger="test.fastpaths"):
        fastpaths.announce(log, metrics.FAST_PATH, {"http_body_reader": "a setting"})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["fast path http_fast_lane is off: Http._safe_int missing in this version"]
    line = next(r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    assert "http_fast_lane=off" in line and "metrics_batch_observe=on" in line
    assert "http_body_reader=off (a setting)" in line
    assert metrics.FAST_PATH.labels("http_fast_lane")._value.get() == 0
    assert metrics.FAST_PATH.labels("metrics_batch_observe")._value.get() == 1


@pytest.mark.parametrize("piece", ["_safe_int", "__touchup__"])
def test_the_sanic_check_names_what_is_missing(monkeypatch, piece):
    from sanic.http import Http

    for cls in Http.__mro__:  # __touchup__ stands on Http and on its base Stream
        if piece in cls.__dict__:
            monkeypatch.delattr(cls, piece)
    assert f"Http.{piece}" in sanicx._check_fast_lane()
