"""The monitoring page and its data routes (GRPS: ``/``, ``/grps/v1/monitor/{metrics,series}``).

The page (static/monitor.html) is self-contained: inline CSS and a small canvas chart script, no
CDN and no third-party JS. It polls ``/grps/v1/monitor/series`` every second and
``/grps/v1/monitor/names`` (a gateway addition) every few seconds to pick up new models.
"""

from __future__ import annotations

from importlib import resources

import orjson
from sanic import Request, Sanic

from gateway.edge import Edge, httpbody

from . import codec
from .monitor import Monitor

PAGE = resources.files(__package__).joinpath("static/monitor.html")


def add_routes(app: Sanic, edge: Edge, monitor: Monitor) -> None:
    html = PAGE.read_bytes()

    async def page(_request: Request):
        return httpbody.raw(html, content_type="text/html; charset=utf-8")

    async def series(request: Request):
        name = request.args.get("name", "")
        data = monitor.series(name)
        if data is None:
            msg = codec.failure(404, f"Not found metric: {name}")
            return httpbody.raw(codec.message_to_json(msg), status=404, content_type="application/json")
        return httpbody.raw(orjson.dumps(data), content_type="application/json")

    async def names(_request: Request):
        monitor.advance()
        return httpbody.raw(orjson.dumps(monitor.names()), content_type="application/json")

    edge.route(app, page, "/", ["GET"], "monitor_root", admit=False)
    edge.route(app, page, "/grps/v1/monitor/metrics", ["GET"], "monitor_metrics", admit=False)
    edge.route(app, series, "/grps/v1/monitor/series", ["GET"], "monitor_series", admit=False)
    edge.route(app, names, "/grps/v1/monitor/names", ["GET"], "monitor_names", admit=False)
