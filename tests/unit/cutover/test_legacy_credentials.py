"""Which credential the legacy HTTP server gets: on a listener with ``api_keys`` the client's
Authorization is the gateway's own key and never leaves the gateway (``legacy.api_key_file``'s key
goes instead, as on the gRPC relay); on an open listener the client's own header passes unchanged.
An in-process worker (a fake Triton, never called on the ``legacy`` route), an aiohttp server as the
legacy one, recording what it received."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from tests.fakes import FakeUpstream
from tests.support import free_port, running_worker

GATEWAY_KEY = "gateway-key-1"
LEGACY_KEY = "legacy-key-9"


@pytest.fixture
async def legacy():
    seen: list[dict] = []

    async def handler(request):
        seen.append(dict(request.headers))
        return web.json_response({"predictions": [1.0]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield seen, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _env(url: str, key_file: str | None = None) -> dict:
    env = {"DIALECTS__TFSERVING__LEGACY__HTTP": url, "DIALECTS__TFSERVING__LEGACY__ROUTE": "legacy",
           "DIALECTS__GRPS__LEGACY__HTTP": url, "DIALECTS__GRPS__LEGACY__ROUTE": "legacy",
           "LISTENERS__TFSERVING_REST__API_KEYS": f"[{GATEWAY_KEY}]"}
    if key_file:
        env["DIALECTS__TFSERVING__LEGACY__API_KEY_FILE"] = key_file
        env["DIALECTS__GRPS__LEGACY__API_KEY_FILE"] = key_file
    return env


async def _post(url: str, auth: str | None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
    async with aiohttp.ClientSession() as http, http.post(url, data=b'{"instances": [1.0]}', headers=headers) as r:
        await r.read()
        return r.status


@pytest.mark.parametrize("with_key_file", [True, False])
async def test_a_keyed_listener_never_sends_the_gateways_key_to_the_legacy_server(legacy, tmp_path, with_key_file):
    seen, url = legacy
    key_file = tmp_path / "legacy.key"
    key_file.write_text(LEGACY_KEY + "\n")
    ports = {"tfserving_rest": free_port(), "grps_http": free_port()}
    env = _env(url, str(key_file) if with_key_file else None)
    async with running_worker(ports, "127.0.0.1:1", upstream_factory=lambda _s: FakeUpstream(), **env):
        # tfserving_rest has api_keys: the client's Authorization is the gateway's key
        tf = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/m:predict"
        assert await _post(tf, f"Bearer {GATEWAY_KEY}") == 200
        sent = {k.lower(): v for k, v in seen[-1].items()}
        assert GATEWAY_KEY not in " ".join(seen[-1].values())
        assert sent.get("authorization") == (f"Bearer {LEGACY_KEY}" if with_key_file else None)
        # grps_http has none: the client's own credential is the legacy server's to check
        grps = f"http://127.0.0.1:{ports['grps_http']}/grps/v1/infer/predict"
        assert await _post(grps, "Bearer client-own") == 200
        assert {k.lower(): v for k, v in seen[-1].items()}["authorization"] == "Bearer client-own"
        assert await _post(grps, None) == 200
        sent = {k.lower(): v for k, v in seen[-1].items()}
        assert sent.get("authorization") == (f"Bearer {LEGACY_KEY}" if with_key_file else None)
