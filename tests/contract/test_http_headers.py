"""The header block of every HTTP listener's answers: what the original servers send, the gateway's
x-request-id, and nothing else (sanic's empty ``alt-svc`` header, once on every answer, included)."""

from __future__ import annotations

import http.client

import pytest

# (listener, method, path, body): one ordinary answer of each HTTP listener
CASES = [
    ("tfserving_rest", "POST", "/v1/models/saved_model_half_plus_three:predict", b'{"instances": [1.0, 2.0]}'),
    ("tfserving_rest", "GET", "/v1/models/saved_model_half_plus_three", None),
    ("tfserving_rest", "GET", "/v1/models/no_such_model", None),  # an error envelope
    ("v2_http", "GET", "/v2/health/ready", None),
    ("v2_http", "GET", "/v2/models/simple", None),
    ("grps_http", "POST", "/grps/v1/infer/predict", b'{"str_data": "hello"}'),
    ("mindie_http", "GET", "/health", None),
    ("admin_http", "GET", "/live", None),
]


def _answer(gateway, listener: str, method: str, path: str, body: bytes | None) -> tuple[int, list[tuple[str, str]]]:
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port(listener), timeout=30)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheaders()
    finally:
        conn.close()


@pytest.mark.parametrize("listener,method,path,body", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_no_empty_or_foreign_headers(gateway, listener, method, path, body):
    status, headers = _answer(gateway, listener, method, path, body)
    names = [name.lower() for name, _ in headers]
    assert "alt-svc" not in names, headers
    assert all(value for _, value in headers), f"a header with an empty value: {headers}"
    assert len(names) == len(set(names)), headers
    assert {"content-type", "connection"} <= set(names), headers
    assert ("content-length" in names) != ("transfer-encoding" in names), headers
    assert set(names) <= {"content-type", "content-length", "transfer-encoding", "connection", "keep-alive",
                          "x-request-id", "www-authenticate", "retry-after"}, (status, headers)


def test_tf_predict_header_block(gateway):
    """TF Serving's predict answer: its two headers, the connection's, and the gateway's request id."""
    status, headers = _answer(gateway, *CASES[0])
    assert status == 200
    assert sorted(name.lower() for name, _ in headers) == ["connection", "content-length", "content-type",
                                                           "x-request-id"]
