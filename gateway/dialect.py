"""A dialect is one declared object; ``gateway.dialects.CATALOGUE`` lists them all.

    Dialect
      name          the ``dialects.<name>`` section, and the ``dialect`` metrics label
      listeners     ListenerSpec(name, default port, "http" | "grpc", description, attach, timeout)
      config        the pydantic model of its YAML section (checked with the whole file at start-up)
      open          (DialectContext, config) -> its per-worker state, created once per worker and
                    shared by all its listeners; the state carries ``errors`` (ErrorRendering) and
                    may define ``async start()`` / ``async close()``
      check         optional "module:function": async (gateway.check.CheckContext) -> list of Row and
                    Finding, what ``gateway check`` reports for the dialect, built from the same
                    mapping code its requests use
    ListenerSpec.attach
      HTTP:  attach(app: sanic.Sanic, edge: Edge, state) -> None   routes added with edge.route(...)
      gRPC:  attach(server: grpc.aio.Server, edge: Edge, state) -> None   handlers wrapped by
             edge.unary(...) / edge.stream(...)

Settings, the worker, the admin listener and metrics read the catalogue; nothing else lists
dialects or listeners. Adding a dialect is one package and one line in the catalogue
(docs/architecture.md has the checklist).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

import grpc
from pydantic import BaseModel, ConfigDict

from gateway.core.errors import GRPC_STATUS, HTTP_STATUS, ErrorKind, GatewayError


class NoConfig(BaseModel):
    """The section of a dialect that has no settings: only ``{}`` is accepted."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class GrpcStatus(NamedTuple):
    """A non-OK gRPC answer: the edge aborts the call with it."""

    code: grpc.StatusCode
    message: str
    trailing: tuple[tuple[str, str | bytes], ...] = ()


class RelayedStatus(GatewayError):
    """A non-OK status another gRPC server answered (the legacy side of a cutover), for the edge to
    answer with as it is, whatever the dialect's own rendering: its code, words and trailing metadata."""

    __slots__ = ("status",)

    def __init__(self, kind: ErrorKind, status: GrpcStatus):
        super().__init__(kind, status.message)
        self.status = status


class ErrorRendering(Protocol):
    """How one dialect writes a GatewayError; every ErrorKind must be rendered (a test checks)."""

    def overloaded(self, limit: int) -> GatewayError:
        """The error this dialect's original server gives when it is at its concurrency limit."""

    def http(self, err: GatewayError, status: int | None = None) -> Any:
        """A sanic HTTPResponse in the dialect's envelope (``status`` overrides the table's)."""

    def grpc(self, err: GatewayError) -> GrpcStatus | Any:
        """A GrpcStatus to abort with, or a response message to answer with (GRPS: OK + FAILURE)."""


class DefaultRendering:
    """The generic envelope: ``{"error": message}`` with the taxonomy's HTTP status, the taxonomy's
    gRPC code. A dialect subclasses it and overrides what its original server writes differently,
    so a dialect without an HTTP (or gRPC) listener need not write that half."""

    def overloaded(self, limit: int) -> GatewayError:
        return GatewayError(ErrorKind.OVERLOADED, f"too many requests in flight ({limit})")

    def http(self, err: GatewayError, status: int | None = None) -> Any:
        from sanic import response

        return response.json({"error": err.message}, status=status or HTTP_STATUS[err.kind])

    def grpc(self, err: GatewayError) -> GrpcStatus | Any:
        return GrpcStatus(GRPC_STATUS[err.kind], err.message)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str  # unique over all dialects: the ``listeners.<name>`` key
    port: int  # default port
    transport: Literal["http", "grpc"]
    description: str
    attach: str  # "module:function", loaded when the listener starts
    timeout_s: float | None = None  # default deadline of a unary call; None: upstream.timeout_s
    # an answer (HTTP header, gRPC trailers) carries the request id the edge generated when the client sent
    # none (False: only the client's own, a listener that answers as its upstream said it: Edge.generated_id_back)
    generated_id_back: bool = True


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    listeners: tuple[ListenerSpec, ...]
    open: str  # "module:function": (DialectContext, config) -> state with ``errors``
    config: type[BaseModel] = NoConfig
    check: str | None = None  # "module:function" for ``gateway check`` (gateway/check.py)
    reaches_models: bool = True  # its section takes ``triton_models`` (gateway.access.ModelScope)


def load(target: str) -> Callable:
    """``"package.module:attr"`` -> the attribute (imported on first use)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
