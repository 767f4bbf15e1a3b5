import pytest
from prometheus_client import REGISTRY

from gateway import metrics

LABELS = {"dialect": "unit", "listener": "unit_http", "route": "predict"}


def _count(model, outcome):
    return REGISTRY.get_sample_value("gateway_requests_total", {**LABELS, "model": model, "outcome": outcome}) or 0.0


def _observe(model, outcome):
    metrics.observe("unit", "unit_http", "predict", model, outcome, 0.001)


def test_outcomes_are_counted_by_error_kind():
    before_ok, before_bad = _count("m", "ok"), _count("m", "invalid_argument")
    _observe("m", "ok")
    _observe("m", "invalid_argument")
    _observe("m", "invalid_argument")
    assert _count("m", "ok") == before_ok + 1
    assert _count("m", "invalid_argument") == before_bad + 2
    hist = REGISTRY.get_sample_value("gateway_request_duration_seconds_count", {**LABELS, "model": "m"})
    assert hist >= 3


def test_unknown_models_do_not_create_label_series():
    _observe("made-up-name-123", "not_found")
    assert _count("_unknown", "not_found") >= 1
    assert _count("made-up-name-123", "not_found") == 0


def test_the_model_label_space_is_bounded(monkeypatch):
    monkeypatch.setattr(metrics, "_model_labels", set())
    monkeypatch.setattr(metrics, "_children", {})
    monkeypatch.setattr(metrics, "MAX_MODEL_LABELS", 2)
    before = _count("_other", "ok")
    for name in ("a", "b", "c", "d"):
        _observe(name, "ok")
    assert _count("a", "ok") >= 1 and _count("b", "ok") >= 1
    assert _count("c", "ok") == 0 and _count("_other", "ok") == before + 2


@pytest.mark.parametrize("outcome", ["ok", "overloaded"])
def test_cached_children_still_count(outcome):
    before = _count("cached", outcome)
    for _ in range(3):
        _observe("cached", outcome)
    assert _count("cached", outcome) == before + 3
