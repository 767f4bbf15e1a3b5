"""One immutable settings tree, read once from YAML plus the environment (never at import time).

Environment overrides (applied after the file):
  GATEWAY_TRITON_GRPC          upstream.grpc (Triton's gRPC endpoint: host:port, dns:///host:port,
                               or ipv4:h1:p1,h2:p2 for several replicas with lb_policy round_robin)
  GATEWAY_WORKERS              workers
  GATEWAY_HOST                 host of every listener
  GATEWAY_<LISTENER>_PORT      e.g. GATEWAY_TFSERVING_REST_PORT=9501
  GATEWAY_<LISTENER>_ENABLED   true/false
  GATEWAY_LOG_LEVEL            log_level

Dialect sections (``dialects.<name>``) are passed through as plain mappings; each dialect parses
its own section, so adding a dialect never touches this module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

# name -> (default port, dialect description printed at start-up)
LISTENERS: dict[str, tuple[int, str]] = {
    "v2_grpc": (8001, "KServe V2 gRPC passthrough"),
    "tfserving_grpc": (8500, "TensorFlow Serving gRPC"),
    "tfserving_rest": (8501, "TensorFlow Serving REST"),
    "grps_http": (7080, "GRPS HTTP"),
    "grps_grpc": (7081, "GRPS gRPC"),
    "mindie_http": (1025, "MindIE-style LLM HTTP (native, TGI, vLLM, OpenAI, Triton generate)"),
    "admin_http": (9090, "admin HTTP (/health, /metrics)"),
}


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    port: int
    host: str = "0.0.0.0"
    enabled: bool = True

    @property
    def description(self) -> str:
        return LISTENERS[self.name][1]


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    grpc: str = "127.0.0.1:18001"  # the local Triton of `gateway local`; Triton's own default 8001 is ours
    lb_policy: str = "pick_first"  # or round_robin: every address the target resolves to (Triton replicas)
    timeout_s: float = 60.0  # per-request deadline when the client gives none
    cache_ttl_s: float = 2.0  # metadata / readiness cache
    retries: int = 3  # attempts for idempotent calls on UNAVAILABLE


@dataclass(frozen=True, slots=True)
class Limits:
    max_request_bytes: int = 1 << 30  # HTTP bodies and gRPC messages
    max_inflight: int = 1024  # concurrent requests per worker before RESOURCE_EXHAUSTED
    keep_alive_s: float = 120.0
    request_read_timeout_s: float = 120.0
    stream_timeout_s: float = 600.0  # deadline of a streamed (generation) request


@dataclass(frozen=True, slots=True)
class LocalTriton:
    """The tritonserver bundled in nvidia-pytriton, for ``gateway local`` and the tests."""

    venv: str = ".venv-triton"
    model_repository: str = "model_repository"
    model_config_name: str = "cpu"
    host: str = "127.0.0.1"
    http_port: int = 18000
    grpc_port: int = 18001
    metrics_port: int = 18002
    workdir: str = ".run/triton"
    startup_timeout_s: float = 120.0
    log_verbose: int = 0


@dataclass(frozen=True, slots=True)
class Settings:
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    listeners: Mapping[str, Listener] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    local_triton: LocalTriton = field(default_factory=LocalTriton)
    workers: int = 1
    log_level: str = "INFO"
    dialects: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = ""  # the file it came from, for metadata answers

    def listener(self, name: str) -> Listener:
        return self.listeners[name]

    def dialect(self, name: str) -> Mapping[str, Any]:
        """The raw ``dialects.<name>`` section (empty mapping when absent)."""
        return self.dialects.get(name, MappingProxyType({}))


def _build(cls, data: Any, where: str):
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise SettingsError(f"{where}: expected a mapping")
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise SettingsError(f"{where}: unknown keys {sorted(unknown)}")
    kwargs = {key: _coerce(value, _TYPES[known[key].type], f"{where}.{key}") for key, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise SettingsError(f"{where}: {e}") from None


_TYPES = {"str": str, "int": int, "float": float, "bool": bool}


def _coerce(value: Any, typ: type, where: str) -> Any:
    try:
        if typ is bool:
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        return typ(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{where}: {value!r} is not a valid {typ.__name__}") from None


def _listeners(data: Any) -> dict[str, Listener]:
    data = data or {}
    if not isinstance(data, Mapping):
        raise SettingsError("listeners: expected a mapping")
    unknown = set(data) - set(LISTENERS)
    if unknown:
        raise SettingsError(f"listeners: unknown listeners {sorted(unknown)}; known: {sorted(LISTENERS)}")
    out = {}
    for name, (port, _) in LISTENERS.items():
        section = dict(data.get(name) or {})
        section.setdefault("port", port)
        out[name] = _build(Listener, {"name": name, **section}, f"listeners.{name}")
    return out


def load(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Read settings once: the YAML file (optional), then environment overrides."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    if path:
        text = Path(path).read_text()
        raw = yaml.safe_load(text) or {}
        if not isinstance(raw, dict):
            raise SettingsError(f"{path}: top level must be a mapping")
    known = {"upstream", "listeners", "limits", "local_triton", "workers", "log_level", "dialects"}
    unknown = set(raw) - known
    if unknown:
        raise SettingsError(f"unknown top-level keys {sorted(unknown)}")
    dialects = raw.get("dialects") or {}
    if not isinstance(dialects, Mapping):
        raise SettingsError("dialects: expected a mapping")
    s = Settings(
        upstream=_build(UpstreamSettings, raw.get("upstream"), "upstream"),
        listeners=_listeners(raw.get("listeners")),
        limits=_build(Limits, raw.get("limits"), "limits"),
        local_triton=_build(LocalTriton, raw.get("local_triton"), "local_triton"),
        workers=_coerce(raw.get("workers", 1), int, "workers"),
        log_level=str(raw.get("log_level", "INFO")),
        dialects=MappingProxyType({k: MappingProxyType(dict(v or {})) for k, v in dialects.items()}),
        source=str(path or ""),
    )
    return _apply_env(s, env)


def _apply_env(s: Settings, env: Mapping[str, str]) -> Settings:
    if env.get("GATEWAY_TRITON_GRPC"):
        s = replace(s, upstream=replace(s.upstream, grpc=env["GATEWAY_TRITON_GRPC"]))
    if env.get("GATEWAY_WORKERS"):
        s = replace(s, workers=_coerce(env["GATEWAY_WORKERS"], int, "GATEWAY_WORKERS"))
    if env.get("GATEWAY_LOG_LEVEL"):
        s = replace(s, log_level=env["GATEWAY_LOG_LEVEL"])
    listeners = dict(s.listeners)
    for name, lst in listeners.items():
        upd = {}
        if env.get("GATEWAY_HOST"):
            upd["host"] = env["GATEWAY_HOST"]
        port = env.get(f"GATEWAY_{name.upper()}_PORT")
        if port:
            upd["port"] = _coerce(port, int, f"GATEWAY_{name.upper()}_PORT")
        enabled = env.get(f"GATEWAY_{name.upper()}_ENABLED")
        if enabled:
            upd["enabled"] = _coerce(enabled, bool, f"GATEWAY_{name.upper()}_ENABLED")
        if upd:
            listeners[name] = replace(lst, **upd)
    s = replace(s, listeners=MappingProxyType(listeners))
    if s.workers < 1:
        raise SettingsError("workers must be >= 1")
    _check_no_loop(s)
    return s


_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"}


def _upstream_addresses(target: str) -> list[tuple[str, int]]:
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
            raise SettingsError(f"upstream.grpc: {target!r} is not host:port (or dns:///host:port, ipv4:h:p,h:p)")
        out.append((host, int(port)))
    return out


def _check_no_loop(s: Settings) -> None:
    """An upstream that is our own listener would proxy every call back to ourselves forever."""
    if s.upstream.lb_policy not in ("pick_first", "round_robin"):
        raise SettingsError(f"upstream.lb_policy: {s.upstream.lb_policy!r} is not pick_first or round_robin")
    for host, port in _upstream_addresses(s.upstream.grpc):
        if host in _LOOPBACK:
            for lst in s.listeners.values():
                if lst.enabled and lst.port == port and lst.host in _LOOPBACK | {"::"}:
                    raise SettingsError(
                        f"upstream.grpc {s.upstream.grpc} is this gateway's own {lst.name} listener; "
                        "point it at Triton (GATEWAY_TRITON_GRPC=host:port)"
                    )
