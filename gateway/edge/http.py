"""The one Sanic factory every HTTP listener uses: limits, timeouts, orjson, no access log.

Each listener is its own Sanic app on its own port, so no two dialects fight over a path. Errors
sanic raises before any handler runs (no route, wrong method, body too large) go to the listener's
edge, which renders them in the dialect's envelope like every other error.
"""

from __future__ import annotations

import itertools

import orjson
from sanic import Sanic

from gateway.edge import Edge
from gateway.settings import Settings

_names = itertools.count()


def orjson_dumps(obj, **_kw) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def make_app(name: str, settings: Settings, edge: Edge | None = None) -> Sanic:
    # Sanic keeps a process-wide registry of app names; tests build many apps in one process.
    # configure_logging=False: sanic's loggers propagate to the gateway's one handler (gateway/observe/logs.py)
    app = Sanic(f"{name}_{next(_names)}", dumps=orjson_dumps, configure_logging=False)
    limits = settings.limits
    app.config.update(
        {
            "REQUEST_MAX_SIZE": limits.max_request_bytes,
            "REQUEST_MAX_HEADER_SIZE": limits.max_header_bytes,  # larger: 431 (in the dialect's envelope)
            "REQUEST_TIMEOUT": limits.request_read_timeout_s,
            "RESPONSE_TIMEOUT": limits.stream_timeout_s,
            "KEEP_ALIVE_TIMEOUT": limits.keep_alive_s,
            "ACCESS_LOG": False,
            "NOISY_EXCEPTIONS": False,
            "FALLBACK_ERROR_FORMAT": "json",
            "REQUEST_BUFFER_SIZE": 1 << 20,
            "MOTD": False,
            "TOUCHUP": False,  # run once per process by the worker (edge/sanicx.touch_up), not once per app
        }
    )
    # the listener checks API keys: a request relayed to a legacy server drops the client's
    # Authorization, the gateway's own key (gateway/cutover/httprelay.py)
    app.ctx.api_keys = edge is not None and edge.keys is not None
    if edge is not None:
        app.error_handler.add(Exception, edge.on_framework_error)
    return app
