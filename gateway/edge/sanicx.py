"""Sanic's private surface, fenced: every piece below sanic's public API that the edge's fast paths
use, checked once at import against the installed sanic (pinned in requirements/constraints.txt).

- ``http_fast_lane`` (edge/fastlane.py): ``HttpProtocol`` subclassed, its ``recv_buffer`` and idle
  clock ``_time``, ``Http``'s stage machine and ``_safe_int``, TouchUp (``__touchup__``, its ``__touched__`` mark once run).
- ``http_body_reader`` (edge/httpbody.py ``read_into_buffer`` and ``received``): ``Http``'s
  ``_send``, ``_receive_more``, ``recv_buffer``, ``request_body`` and its byte counters.
- ``http_answer_headers`` (``httpbody.Answer``): ``HTTPResponse._sanitize_header_value``.

A missing piece turns its path off (gateway/observe/fastpaths.py says so at start-up): the fast
lane is not installed, bodies are read by sanic's own reader, answers' headers by sanic's own
encoding. ``tests/unit/test_fences.py`` lists the modules allowed to import sanic's internals.
"""

from __future__ import annotations

from sanic import HTTPResponse
from sanic.http import Http
from sanic.server.protocols.http_protocol import HttpProtocol

from gateway.observe import fastpaths


def _slots(cls) -> set[str]:
    return {s for c in cls.__mro__ for s in getattr(c, "__slots__", ())}


def _missing(cls, names: tuple[str, ...], kind: str = "slot") -> list[str]:
    have = _slots(cls) if kind == "slot" else set(dir(cls))
    return [f"{cls.__name__}.{n}" for n in names if n not in have]


def _check_fast_lane() -> list[str]:
    missing = _missing(HttpProtocol, ("recv_buffer", "_time", "_http", "transport"))
    missing += _missing(Http, ("_safe_int", "__touchup__"), "attr")
    missing += _missing(Http, ("stage", "keep_alive", "recv_buffer"))
    try:
        from sanic.compat import Header  # noqa: F401
        from sanic.headers import format_http1_response  # noqa: F401
        from sanic.http import Stage
        from sanic.touchup import TouchUp  # noqa: F401

        missing += [f"Stage.{s}" for s in ("IDLE", "HANDLER") if not hasattr(Stage, s)]
    except ImportError as e:
        missing.append(str(e.name or e))
    return missing


FAST_LANE = fastpaths.declare("http_fast_lane", _check_fast_lane())
BODY_READER = fastpaths.declare("http_body_reader", _missing(
    Http, ("_send", "_receive_more", "recv_buffer", "request_body", "request_bytes",
           "request_bytes_left", "expecting_continue", "protocol")))
ANSWER_HEADERS = fastpaths.declare("http_answer_headers",
                                   _missing(HTTPResponse, ("_sanitize_header_value",), "attr"))


def touch_up(app) -> None:
    """Sanic's TouchUp, once per process: it compiles out of sanic's shared HTTP classes the signal
    dispatches that no app handles (several per request; our apps register none) and the Alt-Svc
    header code. The classes are shared by every app of the process, so it must run only once,
    after every HTTP listener exists (``TOUCHUP`` is off in each app's config for that reason).

    Sanic removes the ``alt-svc`` header only when the app's ``server_info`` names one HTTP version;
    ``create_server`` records none, so without the stand-in below every answer carried an empty
    ``alt-svc:`` header that none of the original servers sends. Every listener is HTTP/1.1."""
    from sanic.application.state import ApplicationServerInfo
    from sanic.http.constants import HTTP
    from sanic.touchup import TouchUp

    if not getattr(Http, "__touched__", False):
        state = app.state
        recorded = state.server_info
        state.server_info = [ApplicationServerInfo(settings={"version": HTTP.VERSION_1})]
        try:
            TouchUp.run(app)
        finally:
            state.server_info = recorded
