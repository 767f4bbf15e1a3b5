"""``dialects.<d>.legacy``: where a dialect's original server is, and how each model is routed.

    dialects:
      tfserving:
        legacy:
          http: http://tfs.internal:8501        # REST base URL (TF Serving REST, GRPS HTTP, MindIE HTTP)
          grpc: tfs.internal:8500               # gRPC target (TF Serving gRPC, GRPS gRPC)
          timeout_s: 30                         # deadline of one legacy call (the client's when shorter)
          tls: {ca_file: ca.pem}                # TLS to the legacy server; cert_file + key_file: mTLS
          api_key_file: legacy.key              # sent as Authorization: Bearer <key> when the client sent none
                                                # (a listener with api_keys: the client's is never passed on)
          route: shadow                         # the dialect-wide default: triton | legacy | shadow | canary
          canary_percent: 10                    # canary: this share answered by Triton
          sticky: header:x-user-id              # canary: by this header (or "client": the client address)
          reverse_shadow: false                 # canary: the side that did not answer runs in the background
          rtol: 1.0e-5                          # floats: |a - b| <= atol + rtol * |b| (numpy.isclose)
          atol: 1.0e-5
          shadow_timeout_s: 5                   # the background call's own deadline
          shadow_concurrency: 16                # background calls in flight per model; the rest dropped
          mismatches: {path: .run/migration, per_model: 100, max_bytes: 8388608, record_payloads: false}
          models:
            half: {route: canary, canary_percent: 25, atol: 1.0e-4}

Everything under ``route`` (the route, the canary, tolerances, shadow bounds, ``models``) is read
again when the settings file changes, without a restart (``gateway.cutover.routing.Routes``, the
way a listener's ``api_keys_file`` is followed); the legacy addresses, TLS and credentials are read
at start.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from gateway.settings import Seconds, Strict, UpstreamTls

Route = Literal["triton", "legacy", "shadow", "canary"]
ROUTES: tuple[str, ...] = ("triton", "legacy", "shadow", "canary")
Tolerance = Annotated[float, Field(ge=0)]
Percent = Annotated[float, Field(ge=0, le=100)]


class RouteSettings(Strict):
    """What one model (or the dialect, as its default) is routed by; None: the dialect's value."""

    route: Route | None = None
    canary_percent: Percent | None = None
    sticky: str | None = None  # "header:<name>" | "client"; None: each request drawn on its own
    reverse_shadow: bool | None = None
    rtol: Tolerance | None = None
    atol: Tolerance | None = None
    shadow_timeout_s: Seconds | None = None
    shadow_concurrency: Annotated[int, Field(ge=1, le=4096)] | None = None

    @model_validator(mode="after")
    def _sticky(self):
        s = self.sticky
        if s is not None and s != "client" and not (s.startswith("header:") and len(s) > 7):
            raise ValueError("sticky: 'client' or 'header:<name>'")
        return self


class MismatchLog(Strict):
    """The JSONL of the first ``per_model`` mismatches of each model (gateway/cutover/record.py)."""

    path: str = ".run/migration"  # a directory: <dialect>-mismatches.jsonl (+ .1 when rotated)
    per_model: Annotated[int, Field(ge=0)] = 100
    max_bytes: Annotated[int, Field(ge=4096)] = 8 << 20  # past it the file is rotated (one old file kept)
    record_payloads: bool = False  # both answers' bytes (base64) in each line


class LegacySettings(Strict):
    """``dialects.<d>.legacy`` (the module docstring). The dialect-wide route values are defaults for
    ``models``; a model not listed takes them."""

    http: str | None = None  # base URL, http:// or https://
    grpc: str | None = None  # host:port
    timeout_s: Seconds = 30.0
    connect_timeout_s: Seconds = 5.0
    max_connections: Annotated[int, Field(ge=1)] = 256  # pooled HTTP connections per worker
    max_answer_bytes: Annotated[int, Field(ge=1)] = 256 << 20  # a whole legacy answer larger: an error
    tls: UpstreamTls | None = None
    api_key_file: str | None = None  # one line: the key (Authorization: Bearer), read at start
    headers: dict[str, str] = {}  # sent with every legacy call (a client's own header wins)
    # route settings: the dialect's defaults
    route: Route = "triton"
    canary_percent: Percent = 0.0
    sticky: str | None = None
    reverse_shadow: bool = False
    rtol: Tolerance = 1e-5
    atol: Tolerance = 1e-5
    shadow_timeout_s: Seconds = 5.0
    shadow_concurrency: Annotated[int, Field(ge=1, le=4096)] = 16
    mismatches: MismatchLog = MismatchLog()
    ready_after: Annotated[int, Field(ge=1)] = 1000  # the report's "ready to cut over": this many compared, no mismatch
    models: dict[str, RouteSettings] = {}

    @model_validator(mode="after")
    def _check(self):
        RouteSettings(sticky=self.sticky)
        if self.http is not None and not self.http.startswith(("http://", "https://")):
            raise ValueError("http: a base URL, http://host:port or https://host:port")
        uses_legacy = self.route != "triton" or any(m.route not in (None, "triton") for m in self.models.values())
        if uses_legacy and self.http is None and self.grpc is None:
            raise ValueError("a route other than triton needs the legacy server: http or grpc")
        return self
