"""Logging: JSON lines (text when stderr is a terminal), one access line per request.

    log_level     the level of every logger; the access lines are INFO (WARNING and above hide them)
    log_format    auto (text on a terminal, else JSON lines) | json | text
    access_log    one INFO line per answered request on ``gateway.access`` (false: none at any level)

A JSON line holds ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``pid``, ``msg``, the record's
structured ``fields`` (``log.info("...", extra={"fields": {...}})``) and ``exc`` for a traceback.
The access line's fields: ``request_id``, ``dialect``, ``listener``, ``route``, ``model``,
``status``, ``outcome``, ``bytes_in``, ``bytes_out``, ``duration_ms``, and ``trace_id`` (the W3C
trace id of the request's span) when ``tracing.enabled``; never headers or bodies.

Why a small formatter over stdlib logging rather than python-json-logger: orjson is already a
dependency, the output is one fixed shape that operators and tests can rely on, and only the
``fields`` a call passes explicitly reach the line (no accidental dump of a record's extras).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import time
from typing import TextIO

import orjson

ACCESS = logging.getLogger("gateway.access")
MAX_FIELD = 256  # a client-given value (request id, model) is cut to this in a log line


_second: tuple[int, str] = (-1, "")
_milli: tuple[int, str] = (-1, "")


def _iso(created: float) -> str:
    """``2026-11-23T11:52:53.625Z``; the part up to the second is formatted once per second, the
    whole text once per millisecond (an access flush writes several lines of each)."""
    global _second, _milli
    ms = int(created * 1000)
    if _milli[0] == ms:
        return _milli[1]
    secs, frac = divmod(ms, 1000)
    if _second[0] != secs:
        _second = (secs, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)))
    text = f"{_second[1]}.{frac:03d}Z"
    _milli = (ms, text)
    return text


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
    if _pending:
        flush()  # lines queued for the handler being replaced
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    global _fast, _PID
    _fast, _PID = handler, os.getpid()
    _text[0] = fmt == "text"
    # access lines are INFO records under log_level, like any other; access_log: false silences them
    ACCESS.setLevel(logging.NOTSET if access_log else logging.CRITICAL + 1)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_fast: logging.StreamHandler | None = None  # the handler setup() installed: the access lines' fast path
_text = [False]  # its format is text (else JSON)
_PID = os.getpid()
_pending: list[tuple] = []  # access lines not yet written (see access())
ACCESS_FLUSH_S = 0.1
ACCESS_BATCH = 256
_FIELDS = ("request_id", "dialect", "listener", "route", "model", "status", "outcome", "bytes_in", "bytes_out",
           "duration_ms", "trace_id")


def access(request_id: str, dialect: str, listener: str, route: str, model: str, status: int | str, outcome: str,
           bytes_in: int, bytes_out: int, seconds: float, trace_id: str = "") -> None:
    """The access line of one answered request (callers check ``ACCESS.isEnabledFor(INFO)`` first).

    While setup()'s handler is the only one, the line skips the LogRecord and the handler
    chain: its values are queued as they are, and the queued lines are formatted (the line its
    formatter writes) and written in one write at most ACCESS_FLUSH_S later, or at once past
    ACCESS_BATCH lines (as nginx's ``access_log ... buffer= flush=``): a fraction of what a
    LogRecord through the handler chain costs a request (docs/operations.md). Any other handler (a test's,
    an operator's) gets the ordinary record, as does a call outside an event loop; ``flush()`` writes
    what is queued (at exit, and before setup() replaces the handler)."""
    handler = _fast
    root = logging.root
    if handler is None or len(root.handlers) != 1 or root.handlers[0] is not handler or ACCESS.handlers:
        values = (request_id, dialect, listener, route, model, status, outcome, bytes_in, bytes_out, seconds, trace_id)
        ACCESS.info("request", extra={"fields": dict(_pairs(values))})
        return
    if not ACCESS.isEnabledFor(logging.INFO):  # the same gate as the record's (cached by logging)
        return
    line = (time.time(), request_id, dialect, listener, route, model, status, outcome, bytes_in, bytes_out, seconds,
            trace_id)
    if not _pending:
        try:
            asyncio.get_running_loop().call_later(ACCESS_FLUSH_S, flush)
        except RuntimeError:  # no loop: write it now
            _pending.append(line)
            flush()
            return
    _pending.append(line)
    if len(_pending) >= ACCESS_BATCH:
        flush()


def _pairs(values: tuple):
    """(field, value) of an access line as its fields are written (client-given texts cut to
    MAX_FIELD, the duration in ms); ``trace_id`` only when the request was traced."""
    rid, dialect, listener, route, model, status, outcome, bytes_in, bytes_out, seconds, trace_id = values
    shown = (rid[:MAX_FIELD], dialect, listener, route, model[:MAX_FIELD], status, outcome, bytes_in, bytes_out,
             round(seconds * 1000, 3))
    if trace_id:
        return zip(_FIELDS, (*shown, trace_id), strict=True)
    return zip(_FIELDS[:-1], shown, strict=True)


def flush() -> None:
    """Write the queued access lines."""
    handler = _fast
    lines, pid = [], _PID
    if _text[0]:  # TextFormatter's line: local time with milliseconds, then key=value pairs
        for when, *values in _pending:
            secs = int(when)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(secs))
            pairs = "".join(f" {k}={_text_value(v)}" for k, v in _pairs(values))
            lines.append(f"{stamp},{int((when - secs) * 1000):03d} {pid} INFO gateway.access: request{pairs}")
    else:  # JsonFormatter's line: one dict literal each (its fields in their order)
        dumps = orjson.dumps
        for when, rid, dialect, listener, route, model, status, outcome, bytes_in, bytes_out, seconds, trace in _pending:
            row = {"ts": _iso(when), "level": "INFO", "logger": "gateway.access", "pid": pid, "msg": "request",
                   "request_id": rid[:MAX_FIELD], "dialect": dialect, "listener": listener, "route": route,
                   "model": model[:MAX_FIELD], "status": status, "outcome": outcome, "bytes_in": bytes_in,
                   "bytes_out": bytes_out, "duration_ms": round(seconds * 1000, 3)}
            if trace:
                row["trace_id"] = trace
            # decoded at once: orjson's bytes, kept alive by the hundreds, would each take fresh memory
            lines.append(dumps(row, default=str).decode())
    _pending.clear()
    if handler is None or not lines:
        return
    with handler.lock:
        try:
            handler.stream.write("\n".join(lines) + "\n")
            handler.stream.flush()
        except (OSError, ValueError):  # stderr closed or broken: as logging does, never fail a request
            pass


atexit.register(flush)
