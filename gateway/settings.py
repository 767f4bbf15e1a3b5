"""One settings tree, declared as a pydantic v2 schema and read once: the YAML file, then the environment.

The whole file is checked before any worker starts, dialect sections included (each dialect
declares its section's model in the catalogue). Every level is strict: unknown keys are refused,
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

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
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


class UpstreamSettings(Strict):
    grpc: str = "127.0.0.1:18001"  # the local Triton of `gateway local`; Triton's own default 8001 is ours
    lb_policy: Literal["pick_first", "round_robin"] = "pick_first"  # round_robin: every address the
    #   target resolves to (several Triton replicas: dns:///name:port, or ipv4:h1:p1,h2:p2)
    timeout_s: Seconds = 60.0  # default deadline of a unary call when the listener declares none
    cache_ttl_s: Annotated[float, Field(ge=0)] = 2.0  # metadata / readiness cache
    retries: Annotated[int, Field(ge=1)] = 3  # attempts for idempotent calls on UNAVAILABLE
    tls: UpstreamTls | None = None  # None: plaintext gRPC to Triton

    @field_validator("grpc")
    @classmethod
    def _target(cls, value: str) -> str:
        upstream_addresses(value)
        return value


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
    workers: int = 1
    log_level: str = "INFO"
    log_format: str = "auto"
    access_log: bool = True
    dialects: Mapping[str, BaseModel] = field(default_factory=dict)
    source: str = ""  # the file it came from

    def listener(self, name: str) -> Listener:
        return self.listeners[name]

    def dialect(self, name: str) -> BaseModel:
        """The validated ``dialects.<name>`` section (its defaults when absent)."""
        hit = self.dialects.get(name)
        return hit if hit is not None else _dialect_models()[name]()


# -- the schema, built from the catalogue -----------------------------------------------------
@cache
def _dialect_models() -> dict[str, type[BaseModel]]:
    from gateway.dialects import CATALOGUE

    return {d.name: _section(d) for d in CATALOGUE}


def _section(d) -> type[BaseModel]:
    """A dialect's section: its own model, plus ``triton_models`` when it reaches Triton's models
    (the allowlist gateway.access.ModelScope enforces for every dialect alike; empty: every model)."""
    if not d.reaches_models:
        return d.config
    return create_model(f"{d.config.__name__}Section", __base__=d.config,
                        triton_models=(Names, ()))


@cache
def schema() -> type[BaseModel]:
    """The pydantic model of the whole file."""
    from gateway.dialects import CATALOGUE

    listeners = create_model("Listeners", __base__=Strict, **{
        spec.name: (ListenerSettings, ListenerSettings()) for d in CATALOGUE for spec in d.listeners
    })
    sections = _dialect_models()
    dialects = create_model("Dialects", __base__=Strict, **{
        d.name: (sections[d.name], sections[d.name]()) for d in CATALOGUE
    })
    return create_model(
        "GatewayFile", __base__=Strict,
        host=(str, "0.0.0.0"),
        upstream=(UpstreamSettings, UpstreamSettings()),
        listeners=(listeners, listeners()),
        limits=(Limits, Limits()),
        local_triton=(LocalTriton, LocalTriton()),
        workers=(Annotated[int, Field(ge=1)], 1),
        log_level=(LogLevel, "INFO"),
        log_format=(LogFormat, "auto"),
        access_log=(bool, True),
        dialects=(dialects, dialects()),
    )


# -- reading ------------------------------------------------------------------------------------
def _key_lines(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Dotted path (as a tuple of keys) -> the 1-based line where the YAML file sets it."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            p = (*path, str(key.value))
            out[p] = key.start_mark.line + 1
            _key_lines(value, p, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, str(i))] = item.start_mark.line + 1
            _key_lines(item, (*path, str(i)), out)
    return out


def _read_yaml(path: str) -> tuple[dict, dict[tuple, int]]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SettingsError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SettingsError(f"{where}: YAML syntax error: {what}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}:1: the top level must be a mapping of sections")
    return data, _key_lines(node)


def _apply_env(data: dict, env: Mapping[str, str]) -> dict[tuple, str]:
    """Set ``GATEWAY__A__B=v`` as data[a][b] = yaml(v); returns path -> variable, for errors."""
    sources = {}
    for var in sorted(env):
        if not var.upper().startswith(ENV_PREFIX) or not env[var]:
            continue
        path = tuple(p.lower() for p in var[len(ENV_PREFIX):].split("__"))
        if not all(path):
            raise SettingsError(f"{var}: empty level in the variable's name")
        try:
            value = yaml.safe_load(env[var])
        except yaml.YAMLError:
            value = env[var]
        node = data
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[path[-1]] = value
        sources[path] = var
    return sources


def _describe(err: dict) -> str:
    value = err.get("input")
    if err["type"] in ("missing", "extra_forbidden") or isinstance(value, dict):
        return err["msg"]
    shown = repr(value)
    return f"{err['msg']} (got {shown[:60] + '...' if len(shown) > 60 else shown})"


def _report(e: ValidationError, source: str, lines: dict[tuple, int], env: dict[tuple, str]) -> SettingsError:
    out = []
    for err in e.errors():
        loc = tuple(str(p) for p in err["loc"])
        dotted = ".".join(loc) or "(top level)"
        where = source or "settings"
        by_env = [var for path, var in env.items() if path[:len(loc)] == loc or loc[:len(path)] == path]
        if by_env:
            where = by_env[0]
        else:
            for n in range(len(loc), 0, -1):
                if loc[:n] in lines:
                    where = f"{source}:{lines[loc[:n]]}"
                    break
        out.append(f"{where}: {dotted}: {_describe(err)}")
    return SettingsError("\n".join(out))


def load(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Read, override from the environment, validate everything; SettingsError names every problem."""
    env = os.environ if env is None else env
    source = str(path or "")
    data, lines = _read_yaml(source) if path else ({}, {})
    from_env = _apply_env(data, env)
    try:
        doc = schema().model_validate(data)
    except ValidationError as e:
        raise _report(e, source, lines, from_env) from None
    settings = _resolve(doc, source)
    _check_ports(settings)
    _check_no_loop(settings)
    return settings


def _resolve(doc: BaseModel, source: str) -> Settings:
    from gateway.dialects import CATALOGUE

    listeners = {}
    for d in CATALOGUE:
        for spec in d.listeners:
            s: ListenerSettings = getattr(doc.listeners, spec.name)
            listeners[spec.name] = Listener(
                name=spec.name, dialect=d.name, transport=spec.transport, description=spec.description,
                host=s.host or doc.host, port=s.port or spec.port, enabled=s.enabled,
                timeout_s=s.timeout_s or spec.timeout_s or doc.upstream.timeout_s,
                stream_timeout_s=s.stream_timeout_s or doc.limits.stream_timeout_s,
                api_keys=s.api_keys + _keys_file(spec.name, s.api_keys_file, source), tls=s.tls,
                api_keys_file=s.api_keys_file, inline_api_keys=s.api_keys,
            )
    return Settings(
        upstream=doc.upstream, listeners=MappingProxyType(listeners), limits=doc.limits,
        local_triton=doc.local_triton, workers=doc.workers, log_level=doc.log_level,
        log_format=doc.log_format, access_log=doc.access_log,
        dialects=MappingProxyType({d.name: getattr(doc.dialects, d.name) for d in CATALOGUE}), source=source,
    )


def _keys_file(listener: str, path: str | None, source: str) -> tuple[SecretStr, ...]:
    """The keys of ``listeners.<name>.api_keys_file``; a file without keys is refused (the listener
    would look protected and be open)."""
    if path is None:
        return ()
    from gateway.access import read_keys_file

    where = f"{source or 'settings'}: listeners.{listener}.api_keys_file"
    try:
        keys = read_keys_file(path)
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(f"{where}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if not keys:
        raise SettingsError(f"{where}: {path} holds no key (one a line)")
    return tuple(SecretStr(k) for k in keys)


def _check_ports(s: Settings) -> None:
    seen: dict[int, str] = {}
    for lst in s.listeners.values():
        if lst.enabled:
            if lst.port in seen:
                raise SettingsError(f"{s.source or 'settings'}: listeners.{lst.name}.port: {lst.port} is "
                                    f"also the port of listeners.{seen[lst.port]}")
            seen[lst.port] = lst.name


_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"}


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


def _check_no_loop(s: Settings) -> None:
    """An upstream that is our own listener would proxy every call back to ourselves forever."""
    for host, port in upstream_addresses(s.upstream.grpc):
        if host in _LOOPBACK:
            for lst in s.listeners.values():
                if lst.enabled and lst.port == port and lst.host in _LOOPBACK | {"::"}:
                    raise SettingsError(
                        f"upstream.grpc {s.upstream.grpc} is this gateway's own {lst.name} listener; "
                        f"point it at Triton ({ENV_PREFIX}UPSTREAM__GRPC=host:port)"
                    )
