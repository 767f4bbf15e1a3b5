"""Which side answers a request: the route of its model, the canary draw, and reloading the routes.

    Routes(dialect, legacy, source)   one per dialect per worker
      .policy(model) -> Policy        the model's route values, the dialect's where it sets none
      .choose(model, header, client) -> Decision

A ``Decision`` says who answers the client (``answer``: "triton" | "legacy"), whether the other
side runs in the background to be compared (``shadow``), and the configured route (the metrics'
``route`` label). ``canary`` sends ``canary_percent`` of the requests to Triton: with ``sticky:
header:<name>`` by a hash of that header (a request without it is drawn), with ``sticky: client``
by the client's address, else each request drawn; ``reverse_shadow`` runs the side that did not
answer in the background.

The route values are read again when the settings file changes (looked at no more than every
0.25 s, when a request asks: gateway/process/filewatch.py, as listener API keys are): the file's
``dialects.<d>.legacy`` section is validated again and replaces the routes; a file that cannot be
read or does not validate keeps the routes in use, with a warning. Connection settings (addresses,
TLS, credentials) are read at start; a change to them is logged as needing a restart. Environment
overrides (``GATEWAY__DIALECTS__<D>__LEGACY__...``) are applied at start; a reload reads the file.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import yaml

from gateway.process.filewatch import FileWatch

from .settings import LegacySettings, RouteSettings

log = logging.getLogger("gateway.cutover")

_CONNECTION = ("http", "grpc", "timeout_s", "connect_timeout_s", "max_connections", "max_answer_bytes", "tls",
               "api_key_file", "headers")


@dataclass(frozen=True, slots=True)
class Policy:
    """One model's route values, resolved."""

    route: str
    canary_percent: float
    sticky: str | None
    reverse_shadow: bool
    rtol: float
    atol: float
    shadow_timeout_s: float
    shadow_concurrency: int


class Decision(NamedTuple):
    answer: str  # "triton" | "legacy": the side whose answer the client gets
    shadow: bool  # the other side runs in the background and the two answers are compared
    route: str  # the configured route: triton | legacy | shadow | canary
    policy: Policy

    @property
    def background(self) -> str:
        """The side that runs in the background ("legacy" or "triton")."""
        return "legacy" if self.answer == "triton" else "triton"


def _resolve(legacy: LegacySettings, model: RouteSettings | None) -> Policy:
    def pick(name: str):
        value = getattr(model, name) if model is not None else None
        return getattr(legacy, name) if value is None else value

    return Policy(pick("route"), pick("canary_percent"), pick("sticky"), pick("reverse_shadow"), pick("rtol"),
                  pick("atol"), pick("shadow_timeout_s"), pick("shadow_concurrency"))


class Routes:
    """The routes of one dialect in one worker (module docstring)."""

    def __init__(self, dialect: str, legacy: LegacySettings, source: str = ""):
        self.dialect = dialect
        self.source = source
        self._watch = FileWatch([source] if source else [])
        self._set(legacy)

    def _set(self, legacy: LegacySettings) -> None:
        self.legacy = legacy
        self._default = _resolve(legacy, None)
        self._models = {name: _resolve(legacy, conf) for name, conf in legacy.models.items()}
        self._decisions = {}  # policy -> its fixed Decision (every route but canary)

    def policy(self, model: str) -> Policy:
        if self._watch.changed():
            self.reload()
        return self._models.get(model, self._default)

    def choose(self, model: str, header: Callable[[str], str | None] | None = None, client: str = "") -> Decision:
        """Who answers a request for ``model``. ``header(name)``: the request's header (HTTP) or
        metadata (gRPC) value, for ``sticky: header:<name>``; ``client``: its address (``sticky: client``)."""
        p = self.policy(model)
        if p.route != "canary":
            d = self._decisions.get(p)
            if d is None:
                answer = "legacy" if p.route in ("legacy", "shadow") else "triton"
                d = self._decisions[p] = Decision(answer, p.route == "shadow", p.route, p)
            return d
        to_triton = _draw(p, header, client) < p.canary_percent
        return Decision("triton" if to_triton else "legacy", p.reverse_shadow, "canary", p)

    def reload(self) -> bool:
        """Read the file's ``legacy`` section again; True when the routes changed."""
        try:
            with open(self.source, encoding="utf-8") as f:
                doc = yaml.safe_load(f) or {}
            section = ((doc.get("dialects") or {}).get(self.dialect) or {}).get("legacy")
            if section is None:
                raise ValueError(f"dialects.{self.dialect}.legacy is gone (removing it needs a restart)")
            fresh = LegacySettings.model_validate(section)
        except Exception as exc:  # noqa: BLE001 - any bad file keeps the routes in use
            log.warning("%s: dialects.%s.legacy not reloaded, the routes in use stay: %s", self.source,
                        self.dialect, str(exc).replace("\n", "; "))
            return False
        moved = [k for k in _CONNECTION if getattr(fresh, k) != getattr(self.legacy, k)]
        if moved:
            log.warning("%s: dialects.%s.legacy: %s changed; a restart applies it (routes reloaded)", self.source,
                        self.dialect, ", ".join(moved))
            fresh = fresh.model_copy(update={k: getattr(self.legacy, k) for k in moved})
        if fresh == self.legacy:
            return False
        self._set(fresh)
        log.info("dialects.%s.legacy: routes reloaded from %s (default %s; %d models)", self.dialect, self.source,
                 fresh.route, len(fresh.models))
        return True


def _draw(p: Policy, header: Callable[[str], str | None] | None, client: str) -> float:
    """A number in [0, 100): a hash of the sticky key, or random."""
    key = None
    if p.sticky == "client":
        key = client or None
    elif p.sticky is not None and header is not None:
        key = header(p.sticky[7:])
    if not key:
        return random.random() * 100.0
    return (zlib.crc32(key.encode("utf-8", "surrogateescape")) % 10000) / 100.0


def metadata_getter(metadata) -> Callable[[str], str | None]:
    """``header`` for ``Routes.choose`` over gRPC invocation metadata (a sequence of (key, value))."""

    def get(name: str) -> str | None:
        name = name.lower()
        for k, v in metadata or ():
            if k == name:
                return v if isinstance(v, str) else v.decode("latin-1")
        return None

    return get
