"""Distributed tracing with OpenTelemetry (``tracing:`` in the settings; off by default).

    incoming   W3C trace context (``traceparent``/``tracestate``) from HTTP headers or gRPC metadata
               on every listener; none: a new trace, sampled by ``tracing.sample_ratio``; a caller's
               sampling decision is kept (ParentBased)
    server     one span per request (``Edge``): HTTP server (``{method} {route}``, http.* / url.*) or
               RPC server (``{service}/{method}``, rpc.*), with ``gateway.dialect``, ``gateway.listener``,
               ``gateway.model``, ``gateway.request_id``; ``gen_ai.*`` on text generation; a failed
               request carries ``error.type`` (the gateway's error kind), status ERROR on server faults
    client     one span per Triton call (``upstream``), child of the server span; its context goes
               to Triton as ``traceparent`` gRPC metadata, so Triton's own spans
               (``--trace-config mode=opentelemetry``) join the trace
    export     OTLP (``tracing.protocol``: http/protobuf or grpc) to ``tracing.endpoint``, batched in
               the SDK's background thread (BatchSpanProcessor)

Off, the edge holds no tracer (``listener()`` is None) and the upstream hook returns its argument:
one attribute test per request. The SDK, the exporter and the propagator are OpenTelemetry's;
this module only decides what a span is called and what it carries.
"""

from __future__ import annotations

import asyncio
import os
from contextvars import ContextVar
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.core.errors import GRPC_STATUS, GatewayError

TRITON_SERVICE = "inference.GRPCInferenceService"
HEADERS = frozenset({"traceparent", "tracestate"})  # W3C trace context keys (HTTP headers, gRPC metadata)
# gRPC codes that are the server's fault (OTel RPC conventions: span status ERROR on a server span)
_SERVER_FAULTS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
                            "DATA_LOSS"})
_OK_OUTCOMES = frozenset({"ok", "cancelled"})

_propagator = TraceContextTextMapPropagator()
_tracer: trace.Tracer | None = None
_provider = None
_method: ContextVar[str] = ContextVar("gateway_grpc_method", default="")  # the full gRPC method (interceptor)


# -- set-up -------------------------------------------------------------------------------------
def configure(cfg, exporter=None) -> bool:
    """Start tracing for this process from the ``tracing`` settings (a no-op when not enabled).

    ``exporter``: a SpanExporter instead of OTLP (tests). Returns whether tracing is on.
    """
    global _tracer, _provider
    shutdown()
    if cfg is None or not cfg.enabled:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create({"service.name": cfg.service_name, "service.instance.id": f"{os.getpid()}"})
    _provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(cfg.sample_ratio)))
    _provider.add_span_processor(BatchSpanProcessor(exporter or _otlp_exporter(cfg),
                                                    schedule_delay_millis=cfg.export_interval_ms))
    _tracer = _provider.get_tracer("gateway")
    return True


def _otlp_exporter(cfg):
    if cfg.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=cfg.endpoint, insecure=cfg.endpoint.startswith("http://"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=cfg.endpoint)


def shutdown() -> None:
    """Export what is pending and stop (worker stop; before configure() again)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def flush() -> None:
    """Export the finished spans now (tests; the SDK otherwise batches every ``export_interval_ms``)."""
    if _provider is not None:
        _provider.force_flush()


def enabled() -> bool:
    return _tracer is not None


def interceptors() -> tuple:
    """The gRPC server interceptors tracing needs (none when off): the full method name for span names."""
    return (_MethodInterceptor(),) if _tracer is not None else ()


class _MethodInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, handler_call_details):
        _method.set(handler_call_details.method)  # same task as the handler: the edge reads it
        return await continuation(handler_call_details)


# -- server spans (the edge) ---------------------------------------------------------------------
def listener(dialect: str, name: str) -> ListenerTracer | None:
    """The server-span maker of one listener; None when tracing is off (the edge then does nothing)."""
    return ListenerTracer(dialect, name) if _tracer is not None else None


class _Headers:
    """sanic headers as the propagator's carrier."""

    @staticmethod
    def get(carrier, key):
        value = carrier.get(key)
        return [value] if value is not None else None

    @staticmethod
    def keys(carrier):
        return list(carrier.keys())


class _Metadata:
    """gRPC invocation metadata ((key, value) pairs) as the propagator's carrier."""

    @staticmethod
    def get(carrier, key):
        values = [v for k, v in carrier or () if k == key and isinstance(v, str)]
        return values or None

    @staticmethod
    def keys(carrier):
        return [k for k, _ in carrier or ()]


class Traced:
    """The server span of one request, current (OpenTelemetry's context) while it is handled."""

    __slots__ = ("span", "token", "grpc", "dialect", "listener")

    def __init__(self, span, grpc_call: bool, dialect: str, listener_name: str):
        self.span = span
        self.grpc = grpc_call
        self.dialect = dialect
        self.listener = listener_name
        self.token = otel_context.attach(trace.set_span_in_context(span))

    @property
    def trace_id(self) -> str:
        ctx = self.span.get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else ""

    def end(self, call, outcome: str, status: int | str) -> None:
        """Attributes known at the end (route, model, status, error kind), then the span ends."""
        span = self.span
        try:
            if span.is_recording():
                attrs: dict[str, Any] = {"gateway.route": call.route, "gateway.outcome": outcome}
                if call.model:
                    attrs["gateway.model"] = call.model
                if self.grpc:
                    code = getattr(grpc.StatusCode, status, None) if isinstance(status, str) else None
                    if code is not None:
                        attrs["rpc.grpc.status_code"] = code.value[0]
                    fault = status in _SERVER_FAULTS
                else:
                    attrs["http.response.status_code"] = status
                    fault = isinstance(status, int) and status >= 500
                if outcome not in _OK_OUTCOMES:
                    attrs["error.type"] = outcome  # the gateway's error kind (invalid_argument, not_found...)
                span.set_attributes(attrs)
                if fault:
                    span.set_status(StatusCode.ERROR, outcome)
            span.end()
        finally:
            otel_context.detach(self.token)


class ListenerTracer:
    __slots__ = ("dialect", "name")

    def __init__(self, dialect: str, name: str):
        self.dialect = dialect
        self.name = name

    def _start(self, name: str, parent, attrs: dict[str, Any], call, grpc_call: bool) -> Traced:
        attrs["gateway.dialect"] = self.dialect
        attrs["gateway.listener"] = self.name
        attrs["gateway.request_id"] = call.request_id
        span = _tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attrs)
        return Traced(span, grpc_call, self.dialect, self.name)

    def http(self, call, request) -> Traced:
        """The server span of an HTTP request (its ``traceparent`` header continued, if any)."""
        parent = _propagator.extract(request.headers, getter=_Headers)
        route = getattr(getattr(request, "route", None), "path", None)
        route = "/" + route.lstrip("/") if route is not None else call.route
        attrs = {"http.request.method": request.method, "url.path": request.path,
                 "url.scheme": request.scheme, "http.route": route,
                 "network.protocol.version": request.version}
        host = request.headers.get("host")
        if host:
            attrs["server.address"] = host.rpartition(":")[0] or host
        agent = request.headers.get("user-agent")
        if agent:
            attrs["user_agent.original"] = agent
        if request.ip:
            attrs["client.address"] = request.ip
        return self._start(f"{request.method} {route}", parent, attrs, call, False)

    def grpc(self, call, context) -> Traced:
        """The server span of a gRPC call (``traceparent`` metadata continued, if any)."""
        metadata = context.invocation_metadata()
        parent = _propagator.extract(metadata, getter=_Metadata)
        full = _method.get()
        service, _, method = full.lstrip("/").rpartition("/")
        if not method:
            service, method = "", call.route
        attrs = {"rpc.system": "grpc", "rpc.method": method}
        if service:
            attrs["rpc.service"] = service
        return self._start(f"{service}/{method}" if service else method, parent, attrs, call, True)


# -- text generation (gateway/llm) ---------------------------------------------------------------
def generation(operation: str, model: str, max_tokens: int, finish_reason: str, input_tokens: int,
               output_tokens: int) -> None:
    """gen_ai.* on the current server span (a generation that ended)."""
    if _tracer is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({"gen_ai.operation.name": operation, "gen_ai.provider.name": "triton",
                             "gen_ai.request.model": model, "gen_ai.request.max_tokens": max_tokens,
                             "gen_ai.response.finish_reasons": (finish_reason,),
                             "gen_ai.usage.input_tokens": input_tokens,
                             "gen_ai.usage.output_tokens": output_tokens})


# -- client spans (calls to Triton) --------------------------------------------------------------
class _Off:
    """The upstream hook while tracing is off: the metadata as given, nothing else."""

    __slots__ = ("metadata",)

    def __enter__(self):
        return self.metadata

    def __exit__(self, *exc) -> bool:
        return False


_OFF = _Off()


def upstream(method: str, model: str = "", metadata=None):
    """``with tracing.upstream("ModelInfer", model, metadata) as md``: a client span around one Triton
    call; ``md`` is the metadata to send: ``metadata`` less any caller's trace context, plus this
    span's ``traceparent`` (tracing off, or a call outside any request such as the health poll:
    ``metadata`` unchanged, no span)."""
    if _tracer is None or not trace.get_current_span().get_span_context().is_valid:  # off, or not in a request
        _OFF.metadata = metadata  # entered at once, in the loop's thread: no other call in between
        return _OFF
    return _Client(method, model, metadata)


class _Client:
    __slots__ = ("span", "metadata")

    def __init__(self, method: str, model: str, metadata):
        attrs = {"rpc.system": "grpc", "rpc.service": TRITON_SERVICE, "rpc.method": method}
        if model:
            attrs["gateway.model"] = model
        self.span = _tracer.start_span(f"{TRITON_SERVICE}/{method}", kind=SpanKind.CLIENT, attributes=attrs)
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=trace.set_span_in_context(self.span))
        kept = tuple((k, v) for k, v in metadata or () if k not in HEADERS)
        self.metadata = kept + tuple(carrier.items())

    def __enter__(self):
        return self.metadata

    def __exit__(self, exc_type, exc, _tb) -> bool:
        span = self.span
        if span.is_recording():
            if exc is None:
                span.set_attribute("rpc.grpc.status_code", 0)
            elif isinstance(exc, grpc.aio.AioRpcError) or isinstance(getattr(exc, "status", None), tuple):
                # Triton's status (the V2 passthrough keeps it as UpstreamStatus.status)
                code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else exc.status.code
                span.set_attributes({"rpc.grpc.status_code": code.value[0], "error.type": code.name})
                span.set_status(StatusCode.ERROR, code.name)
            elif isinstance(exc, GatewayError):  # an in-stream error (the call itself ended OK)
                span.set_attributes({"rpc.grpc.status_code": GRPC_STATUS[exc.kind].value[0],
                                     "error.type": exc.kind.value})
                span.set_status(StatusCode.ERROR, exc.kind.value)
            elif isinstance(exc, (asyncio.CancelledError, GeneratorExit)):  # the caller went away
                span.set_attribute("error.type", "cancelled")
            else:
                span.set_attribute("error.type", exc_type.__qualname__)
                span.set_status(StatusCode.ERROR, exc_type.__qualname__)
        span.end()
        return False
