"""The settings vocabulary: the sections every part of the gateway reads, and the resolved ``Settings``.

Dialects build their own sections from ``Strict`` and the types here; ``gateway.config`` builds the
whole file's schema from the catalogue and reads it (YAML, then the environment). The whole file is
checked before any worker starts, dialect sections included. Every level is strict: unknown keys are refused,
``"false"`` is not a boolean, ``8501.9`` is not a port, a string is not a list. A failure raises
SettingsError with one line per problem: the file, the line the YAML loader knows, the dotted
field and what is wrong; a YAML syntax error is one line too.

Environment overrides, one rule: ``GATEWAY__<DOTTED__PATH>=<YAML scalar>`` sets the field at that
path (``__`` separates levels, case-insensitive), after the file and before validation:

    GATEWAY__UPSTREAM__GRPC=triton:8001
    GATEWAY__WORKERS=4
    GATEWAY__HOST=0.0.0.0                               every listener's default host
    GATEWAY__LISTENERS__TFSERVING_REST__PORT=9501
    GATEWAY__DIALECTS__GRPS__PRETTY_JSON=false

Why pydantic (not msgspec): it is already in the dependency tree (openai, text-generation), its
errors carry the location of every problem, strict mode and ``extra="forbid"`` give the checks
the issue asks for at every level, and validators express the few cross-field rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

ENV_PREFIX = "GATEWAY__"


class SettingsError(ValueError):
    pass


class Strict(BaseModel):
    """Base of every section: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0)]
Names = Annotated[tuple[str, ...], Field(strict=False)]  # a YAML list of strings; a bare string is refused


class ListenerTls(Strict):
    """``listeners.<name>.tls``: PEM files; ``client_ca_file`` makes clients present a certificate (mTLS)."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None


class UpstreamTls(Strict):
    """``upstream.tls``: TLS to Triton (``tls: {}``: the system's CAs); cert_file + key_file: mTLS."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None  # the name Triton's certificate must carry, when not the target's host

    @model_validator(mode="after")
    def _pair(self):
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate and its key)")
        return self


ApiKey = Annotated[SecretStr, Field(min_length=1)]


class ListenerSettings(Strict):
    host: str | None = None  # None: the top-level ``host``
    port: Port | None = None  # None: the dialect's default port
    enabled: bool = True
    timeout_s: Seconds | None = None  # deadline of a unary call (None: the listener's default)
    stream_timeout_s: Seconds | None = None  # deadline of a streamed call (None: limits.stream_timeout_s)
    # access (gateway/access.py): keys required as ``Authorization: Bearer <key>`` (none: open)
    api_keys: Annotated[tuple[ApiKey, ...], Field(strict=False)] = ()
    api_keys_file: str | None = None  # one key a line (# comments); adds to api_keys
    tls: ListenerTls | None = None


class SharedMemorySettings(Strict):
    """``upstream.shared_memory``: large input tensors handed to a Triton on this host through POSIX
    shared memory instead of gRPC (gateway/upstream/shm.py)."""

    enabled: Literal["auto"] | bool = "auto"  # auto: when the target is one loopback address or a unix socket
    min_bytes: Annotated[int, Field(ge=1)] = 1 << 20  # input tensors at least this large
    pool_bytes: Annotated[int, Field(ge=1 << 20)] = 256 << 20  # the region, per worker


class UpstreamSettings(Strict):
    grpc: str = "127.0.0.1:18001"  # the local Triton of `gateway local`; Triton's own default 8001 is ours
    lb_policy: Literal["pick_first", "round_robin"] = "pick_first"  # round_robin: every address the
    #   target resolves to (several Triton replicas: dns:///name:port, or ipv4:h1:p1,h2:p2)
    timeout_s: Seconds = 60.0  # default deadline of a unary call when the listener declares none
    cache_ttl_s: Annotated[float, Field(ge=0)] = 2.0  # metadata / readiness cache
    retries: Annotated[int, Field(ge=1)] = 3  # attempts for idempotent calls on UNAVAILABLE
    tls: UpstreamTls | None = None  # None: plaintext gRPC to Triton
    shared_memory: SharedMemorySettings = SharedMemorySettings()
    # h2: the calls to Triton written as HTTP/2 frames on the event loop (gateway/h2/client.py), every target
    #   (host:port, dns:, ipv4:, ipv6:, unix:) and upstream.tls alike; grpc: through grpc.aio.
    #   docs/operations.md, "The upstream transport"
    transport: Literal["grpc", "h2"] = "h2"
    # the largest answer message taken from Triton (larger: RESOURCE_EXHAUSTED, the call reset); the
    #   default is Triton's own gRPC maximum (INT32_MAX), on both transports
    max_answer_bytes: Annotated[int, Field(ge=1, le=2**31 - 1)] = 2**31 - 1
    # which Triton calls a client that went away cancels: streams (ModelStreamInfer: a generation stops; a unary
    #   call is left to finish, its answer dropped), all (unary calls too), none (both run to their end or deadline).
    #   Tritons before 2.59.0 (NGC 25.06) can crash on a cancellation: docs/operations.md "Cancelling Triton calls"
    cancel: Literal["streams", "all", "none"] = "streams"

    @field_validator("grpc")
    @classmethod
    def _target(cls, value: str) -> str:
        upstream_addresses(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data):
        """A key this section had and lost: refused with why and what to do, not as an unknown key."""
        if isinstance(data, dict) and "stream_mux" in data:
            raise ValueError("stream_mux was removed: every ModelInfer is one call to Triton (messages on "
                             "ModelStreamInfer streams measured no cheaper than HTTP/2 unary calls, "
                             "docs/benchmarks.md); delete upstream.stream_mux")
        return data


class Limits(Strict):
    max_request_bytes: Annotated[int, Field(ge=1)] = 100 << 20  # HTTP bodies (413) and gRPC messages
    max_inflight: Annotated[int, Field(ge=1)] = 1024  # requests in flight per worker before "overloaded"
    keep_alive_s: Seconds = 120.0
    request_read_timeout_s: Seconds = 120.0
    stream_timeout_s: Seconds = 600.0  # default deadline of a streamed (generation) call
    drain_s: Annotated[float, Field(ge=0)] = 5.0  # on SIGTERM: time given to requests in flight
    # limits before allocation (issue 13); checked before the thing they bound is built
    max_tensor_bytes: Annotated[int, Field(ge=1)] = 256 << 20  # one decoded tensor (shape x dtype size)
    max_json_depth: Annotated[int, Field(ge=1)] = 1 << 20  # JSON nesting (GRPS/MindIE: orjson's own 1024)
    max_prompt_chars: Annotated[int, Field(ge=1)] = 40 << 20  # MindIE/OpenAI text input (MindIE: 40 x 1 Mi)
    max_name_chars: Annotated[int, Field(ge=1)] = 1024  # model, signature, tensor and feature names
    max_header_bytes: Annotated[int, Field(ge=1024)] = 8192  # HTTP request line + headers (larger: 431)
    max_grpc_streams: Annotated[int, Field(ge=1)] = 100  # concurrent gRPC streams per connection
    offload_bytes: Annotated[int, Field(ge=0)] = 64 << 10  # bodies/answers past this parse in a thread
    offload_threads: Annotated[int, Field(ge=1)] = 2  # the per-worker parse thread pool


class LocalTriton(Strict):
    """The tritonserver bundled in nvidia-pytriton, for ``gateway local`` and the tests."""

    venv: str = ".venv-triton"
    model_repository: str = "model_repository"
    model_config_name: str = "cpu"
    host: str = "127.0.0.1"
    http_port: Port = 18000
    grpc_port: Port = 18001
    metrics_port: Port = 18002
    workdir: str = ".run/triton"
    startup_timeout_s: Seconds = 120.0
    log_verbose: Annotated[int, Field(ge=0)] = 0


class TracingSettings(Strict):
    """``tracing``: OpenTelemetry spans (gateway/observe/tracing.py, docs/operations.md); off by default."""

    enabled: bool = False
    endpoint: str = "http://127.0.0.1:4318/v1/traces"  # the OTLP receiver (a Collector); grpc: host:4317
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    sample_ratio: Annotated[float, Field(ge=0, le=1)] = 1.0  # new traces kept (a caller's choice stands)
    service_name: str = "triton-gateway"
    export_interval_ms: Annotated[int, Field(ge=1)] = 1000  # spans are sent in batches this often


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LogFormat = Literal["auto", "json", "text"]  # auto: text when stderr is a terminal, else JSON lines


@dataclass(frozen=True, slots=True)
class Listener:
    """A listener as it will run: its catalogue declaration merged with its settings."""

    name: str
    dialect: str
    transport: str
    description: str
    host: str
    port: int
    enabled: bool
    timeout_s: float
    stream_timeout_s: float
    api_keys: tuple[SecretStr, ...] = ()  # api_keys and the keys of api_keys_file (empty: open)
    tls: ListenerTls | None = None
    api_keys_file: str | None = None  # read again by each worker when it changes (access.ReloadingKeys)
    inline_api_keys: tuple[SecretStr, ...] = ()  # api_keys alone


@dataclass(frozen=True, slots=True)
class Settings:
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    listeners: Mapping[str, Listener] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    local_triton: LocalTriton = field(default_factory=LocalTriton)
    tracing: TracingSettings = field(default_factory=TracingSettings)
    workers: int = 1
    workers_auto: bool = False  # ``workers: auto`` chose the number (gateway/process/cpus.py)
    log_level: str = "INFO"
    log_format: str = "auto"
    access_log: bool = True
    http_fast_path: bool = True  # gateway/edge/fastlane.py
    # h2: plain-TCP gRPC listeners served as HTTP/2 frames on the worker's loop (gateway/h2/server.py);
    #   grpc: grpc.aio's server. TLS listeners and tracing keep grpc.aio either way
    grpc_server: str = "h2"
    dialects: Mapping[str, BaseModel] = field(default_factory=dict)
    source: str = ""  # the file it came from

    def listener(self, name: str) -> Listener:
        return self.listeners[name]

    def dialect(self, name: str) -> BaseModel:
        """The validated ``dialects.<name>`` section (gateway.config.load fills every dialect's)."""
        return self.dialects[name]


def unix_path(target: str) -> str | None:
    """The socket's path of a ``unix:path`` or ``unix:///absolute/path`` target (None: not one)."""
    if not target.startswith("unix:"):
        return None
    rest = target[5:]
    return rest[2:] if rest.startswith("//") else rest


def upstream_addresses(target: str) -> list[tuple[str, int]]:
    """(host, port) of each address in a grpc target: host:port, dns:[//authority]/host:port,
    ipv4:h:p[,h:p...] or ipv6:[h]:p[,...]. unix: targets have none."""
    if target.startswith("unix:"):
        return []
    scheme, sep, rest = target.partition(":")
    if sep and scheme == "dns":
        rest = rest.removeprefix("//")
        rest = rest.partition("/")[2] if target.startswith("dns://") else rest
        items = [rest]
    elif sep and scheme in ("ipv4", "ipv6"):
        items = rest.split(",")
    else:
        items = [target]
    out = []
    for item in items:
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{target!r} is not host:port (or dns:///host:port, ipv4:h:p,h:p)")
        out.append((host, int(port)))
    return out
