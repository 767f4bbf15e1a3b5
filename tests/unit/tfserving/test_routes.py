"""TF Serving REST: an inference path is read with TF Serving's expressions once, then remembered."""

from __future__ import annotations

import pytest

from gateway.core.errors import GatewayError
from gateway.dialects.tfserving import http
from gateway.dialects.tfserving.mapping import ServableRef


@pytest.fixture
def routes(monkeypatch):
    monkeypatch.setattr(http, "_routes", {})
    monkeypatch.setattr(http, "MAX_ROUTES", 4)
    return http._routes


def test_paths_are_read_as_tf_serving_reads_them(routes):
    assert http._inference_route("/v1/models/m/versions/3:predict") == ("m", 3, None, "predict", ServableRef("m", 3))
    assert http._inference_route("/V1/MODELS/m/labels/l%20x:classify") == (
        "m", None, "l x", "classify", ServableRef("m", None, "l x"))
    assert http._inference_route("/v1/models/m:PREDICT") is None  # the verb is compared as written
    assert http._inference_route("/v1/models/m") is None
    assert list(routes) == ["/v1/models/m/versions/3:predict", "/V1/MODELS/m/labels/l%20x:classify"]
    assert http._inference_route("/v1/models/m/versions/3:predict") is routes["/v1/models/m/versions/3:predict"]


def test_a_refused_path_raises_every_time_and_is_not_kept(routes):
    for _ in range(2):
        with pytest.raises(GatewayError):  # version past int64: TF Serving's 400
            http._inference_route(f"/v1/models/m/versions/{2**63}:predict")
        with pytest.raises(GatewayError, match="Model name is"):
            http._inference_route("/v1/models/" + "n" * 5000 + ":predict")
    assert not routes


def test_the_remembered_paths_are_bounded(routes):
    for i in range(10):
        assert http._inference_route(f"/v1/models/m{i}:predict")[:4] == (f"m{i}", None, None, "predict")
    assert 0 < len(routes) <= 4
    long = "/v1/models/" + "m" * http.MAX_ROUTE_PATH + ":regress"
    assert http._inference_route(long)[3] == "regress" and long not in routes
