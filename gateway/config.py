"""Reading the settings: the whole file's schema, built from the catalogue, then YAML and the environment.

``gateway.settings`` is the vocabulary (sections, ``Settings``); this module sits above the
dialects, since the schema is made of every dialect's section (``Dialect.config``) and every
listener of the catalogue. ``load`` is the one entry point: read, apply ``GATEWAY__`` variables,
validate everything, resolve listeners, check ports and the upstream loop; ``SettingsError``
names every problem with its file and line (or variable).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, PlainValidator, SecretStr, ValidationError, create_model
from pydantic_core import PydanticCustomError

from gateway.access import read_keys_file
from gateway.dialects import CATALOGUE
from gateway.process import cpus
from gateway.process.shared import single_worker_problems
from gateway.settings import (
    ENV_PREFIX,
    Limits,
    Listener,
    ListenerSettings,
    LocalTriton,
    LogFormat,
    LogLevel,
    Names,
    Settings,
    SettingsError,
    Strict,
    TracingSettings,
    UpstreamSettings,
    upstream_addresses,
)

__all__ = ["SettingsError", "load", "schema"]


# -- the schema, built from the catalogue -----------------------------------------------------
@cache
def _dialect_models() -> dict[str, type[BaseModel]]:
    return {d.name: _section(d) for d in CATALOGUE}


def _section(d) -> type[BaseModel]:
    """A dialect's section: its own model, plus ``triton_models`` when it reaches Triton's models
    (the allowlist gateway.access.ModelScope enforces for every dialect alike; empty: every model)."""
    if not d.reaches_models:
        return d.config
    return create_model(f"{d.config.__name__}Section", __base__=d.config,
                        triton_models=(Names, ()))


def _workers(value):
    """``workers``: a whole number of at least 1, or ``auto`` (one per usable CPU: gateway/process/cpus.py)."""
    if value == "auto" or (type(value) is int and value >= 1):
        return value
    raise PydanticCustomError("workers", "Input should be a whole number of at least 1, or auto")


@cache
def schema() -> type[BaseModel]:
    """The pydantic model of the whole file."""
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
        tracing=(TracingSettings, TracingSettings()),
        workers=(Annotated[int | str, PlainValidator(_workers, json_schema_input_type=int | Literal["auto"])], 1),
        log_level=(LogLevel, "INFO"),
        log_format=(LogFormat, "auto"),
        access_log=(bool, True),
        http_fast_path=(bool, True),
        grpc_server=(Literal["h2", "grpc"], "h2"),
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
    if doc.workers == "auto":
        settings = _auto_workers(settings)
    _check_ports(settings)
    _check_no_loop(settings)
    return settings


def _resolve(doc: BaseModel, source: str) -> Settings:
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
        local_triton=doc.local_triton, tracing=doc.tracing, log_level=doc.log_level, log_format=doc.log_format,
        access_log=doc.access_log, http_fast_path=doc.http_fast_path, grpc_server=doc.grpc_server,
        workers=1 if doc.workers == "auto" else doc.workers,  # auto: counted by load (_auto_workers)
        dialects=MappingProxyType({d.name: getattr(doc.dialects, d.name) for d in CATALOGUE}), source=source,
    )


def _auto_workers(settings: Settings) -> Settings:
    """``workers: auto``: one per CPU this process may use (gateway/process/cpus.py); 1 where a setting keeps
    state that one process owns (gateway/process/shared.py), which a number above 1 would be refused for."""
    workers = replace(settings, workers=cpus.usable(), workers_auto=True)
    return replace(workers, workers=1) if single_worker_problems(workers) else workers


def _keys_file(listener: str, path: str | None, source: str) -> tuple[SecretStr, ...]:
    """The keys of ``listeners.<name>.api_keys_file``; a file without keys is refused (the listener
    would look protected and be open)."""
    if path is None:
        return ()
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
