"""Contract tests: every test here is marked ``contract`` (tests/conftest.py starts the session's
Triton and gateway); the TF Serving clients several files share."""

import grpc
import pytest

from gateway._proto.tensorflow_serving.apis import prediction_service_pb2_grpc
from tests.support import http_call


def pytest_collection_modifyitems(items):
    for item in items:
        if "/contract/" in str(item.fspath):
            item.add_marker(pytest.mark.contract)


@pytest.fixture(scope="module")
def tf_rest(gateway):
    """``tf_rest(method, path, body=None, headers=None)`` -> (status, Content-Type, body) from the
    gateway's TF Serving REST listener."""
    base = gateway.url("tfserving_rest")

    def call(method: str, path: str, body: bytes | str | None = None, headers: dict | None = None):
        return http_call(base, method, path, body, headers, timeout=60)

    return call


@pytest.fixture(scope="module")
def tf_channel(gateway):
    """A blocking gRPC channel to the gateway's TF Serving gRPC listener."""
    with grpc.insecure_channel(gateway.target("tfserving_grpc")) as channel:
        yield channel


@pytest.fixture(scope="module")
def tf_stub(tf_channel):
    """TF Serving's PredictionService stub on ``tf_channel``."""
    return prediction_service_pb2_grpc.PredictionServiceStub(tf_channel)
