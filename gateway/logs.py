"""Logging: JSON lines (text when stderr is a terminal), one access line per request.

    log_level     the level of every logger; the access lines are INFO (WARNING and above hide them)
    log_format    auto (text on a terminal, else JSON lines) | json | text
    access_log    one INFO line per answered request on ``gateway.access`` (false: none at any level)

A JSON line holds ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``pid``, ``msg``, the record's
structured ``fields`` (``log.info("...", extra={"fields": {...}})``) and ``exc`` for a traceback.
The access line's fields: ``request_id``, ``dialect``, ``listener``, ``route``, ``model``,
``status``, ``outcome``, ``bytes_in``, ``bytes_out``, ``duration_ms``; never headers or bodies.

Why a small formatter over stdlib logging rather than python-json-logger: orjson is already a
dependency, the output is one fixed shape that operators and tests can rely on, and only the
``fields`` a call passes explicitly reach the line (no accidental dump of a record's extras).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

import orjson

ACCESS = logging.getLogger("gateway.access")
MAX_FIELD = 256  # a client-given value (request id, model) is cut to this in a log line


def _iso(created: float) -> str:
    secs = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{int((created - secs) * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": _iso(record.created), "level": record.levelname, "logger": record.name,
               "pid": record.process, "msg": record.getMessage()}
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time pid LEVEL logger: message key=value ...`` (values with spaces or quotes are JSON-quoted)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        line = super().formatMessage(record)
        fields = getattr(record, "fields", None)
        if fields:
            line += "".join(f" {k}={_text_value(v)}" for k, v in fields.items())
        return line


def _text_value(value) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=') or not text.isprintable():
        return orjson.dumps(text).decode()
    return text


def setup(level: str = "INFO", fmt: str = "auto", access_log: bool = True, stream: TextIO | None = None) -> None:
    """Configure the root logger once per process (the CLI and each worker call it)."""
    stream = stream if stream is not None else sys.stderr
    if fmt == "auto":
        fmt = "text" if _isatty(stream) else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # access lines are INFO records under log_level, like any other; access_log: false silences them
    ACCESS.setLevel(logging.NOTSET if access_log else logging.CRITICAL + 1)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def access(request_id: str, dialect: str, listener: str, route: str, model: str, status: int | str, outcome: str,
           bytes_in: int, bytes_out: int, seconds: float) -> None:
    """The access line of one answered request (callers check ``ACCESS.isEnabledFor(INFO)`` first)."""
    ACCESS.info("request", extra={"fields": {
        "request_id": request_id[:MAX_FIELD], "dialect": dialect, "listener": listener, "route": route,
        "model": model[:MAX_FIELD], "status": status, "outcome": outcome, "bytes_in": bytes_in,
        "bytes_out": bytes_out, "duration_ms": round(seconds * 1000, 3)}})
