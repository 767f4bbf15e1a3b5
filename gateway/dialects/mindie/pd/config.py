"""``dialects.mindie.pd``: which PD role this instance plays, as pydantic v2 models.

    dialects:
      mindie:
        pd:
          role: coordinator          # standard (default) | prefill | decode | coordinator
          # prefill
          phase_split: true          # false: P runs the whole generation and relays the rest to D
          d_port: 1025               # D's port when d-target names only an ip
          handoff_timeout_s: 10      # P -> D hand-off call
          trusted_peers: [127.0.0.1, "::1"]   # who may call D's internal /pd/v1/* routes (addresses or names)
          # decode
          heartbeat_s: 5             # `ka:heartbeat` after this much silence on /dresult
          max_pending_records: 100000
          # coordinator
          prefill: ["127.0.0.1:2025", "127.0.0.1:2026"]
          decode: ["127.0.0.1:3025", "127.0.0.1:3026"]
          standard: []               # PD-mixed instances for short prompts (else a P runs them alone)
          min_pd_prompt_chars: 0     # prompts shorter than this are not disaggregated (0 = always split)
          max_requests: 10000        # in flight; over it: 429 `Too many requests`
          max_retry: 5
          infer_timeout_s: 600
          takeover_backoff_s: 5      # another client took over a D's /dresult: D out of rotation this long (doubling)
          # every role
          peer_api_key_file: null    # the API key sent to PD peers whose listeners have api_keys
          tls: {ca_file: ca.pem, cert_file: me.pem, key_file: me-key.pem}   # https to PD peers (mTLS)

Strict, frozen and closed (``extra="forbid"``) so the lead's pydantic configuration schema can
embed ``PdConfig`` as it is; until then ``MindieConfig.parse`` validates the raw mapping with it.
"""

from __future__ import annotations

import ssl
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .peers import client_ssl, is_host

Role = Literal["standard", "prefill", "decode", "coordinator"]


def split_host_port(value: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port`` (an address, ``[v6]:port``, or a DNS name) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        if default_port is None:
            raise ValueError(f"{value!r} is not host:port")
        return value, default_port
    host = host.strip("[]")
    if not host or not is_host(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    return host, int(port)


class PeerTls(BaseModel):
    """``dialects.mindie.pd.tls``: TLS on the calls this instance sends its PD peers (gateway/dialects/
    mindie/pd/peers.py); the same fields as ``upstream.tls``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    ca_file: str | None = None  # the CA the peers' certificates must chain to (None: the system's)
    cert_file: str | None = None  # with key_file: the client certificate, for peers that ask (mTLS)
    key_file: str | None = None

    @model_validator(mode="after")
    def _loads(self) -> PeerTls:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate and its key)")
        try:
            client_ssl(self)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"cannot load the TLS files: {getattr(e, 'strerror', None) or e}") from None
        return self


class PdConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    role: Role = "standard"
    # prefill
    phase_split: bool = True
    d_port: int = Field(default=1025, gt=0, lt=65536)
    # P: D's hand-off (HTTP) address for a d-target `ip;interCommPort` that comes without MindIE-MS's
    # d-port header, e.g. {"10.0.0.3;1121": "10.0.0.3:1025"} (pd/headers.py)
    d_inter_comm: dict[str, str] = Field(default_factory=dict, strict=False)
    # P: requests without any PD header. MindIE's P refuses them (400 `DMI request must have req-type,
    # req-id, d-target headers`); true serves them as a standard instance would (the coordinator's
    # short prompts, `min_pd_prompt_chars`, when no `standard` instance is listed)
    serve_without_pd_headers: bool = False
    handoff_timeout_s: float = Field(default=10.0, gt=0)
    trusted_peers: tuple[str, ...] = Field(default=("127.0.0.1", "::1"), strict=False)
    # decode
    heartbeat_s: float = Field(default=5.0, gt=0)
    max_pending_records: int = Field(default=100_000, gt=0)
    # coordinator
    prefill: tuple[str, ...] = Field(default=(), strict=False)
    decode: tuple[str, ...] = Field(default=(), strict=False)
    standard: tuple[str, ...] = Field(default=(), strict=False)
    min_pd_prompt_chars: int = Field(default=0, ge=0)
    max_requests: int = Field(default=10_000, gt=0)
    max_retry: int = Field(default=5, ge=0)
    infer_timeout_s: float = Field(default=600.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    takeover_backoff_s: float = Field(default=5.0, gt=0)  # another client took a D's /dresult: wait, doubling
    # every role: the API key this instance sends its PD peers (coordinator -> P and D's /dresult,
    # P -> D hand-off) when their mindie_http listeners have api_keys; a file, first key line
    peer_api_key_file: str | None = None
    tls: PeerTls | None = None  # calls to PD peers over https (mTLS with cert_file/key_file): peers.py

    def peer_headers(self) -> dict[str, str]:
        """``Authorization: Bearer <key>`` for calls to PD peers (empty without a key file)."""
        if not self.peer_api_key_file:
            return {}
        from gateway.access import read_keys_file

        return {"Authorization": f"Bearer {read_keys_file(self.peer_api_key_file)[0]}"}

    def single_worker_reason(self) -> str | None:
        """The coordinator keeps state that one process owns (docs/architecture.md, "State across
        workers"): refused with ``workers`` > 1. P keeps none between requests; D's workers pass
        their records to the one holding ``/dresult`` (pd/fanin.py)."""
        if self.role == "coordinator":
            return ("role: coordinator: each worker would open its own /dresult link per D, the links "
                    "would take each other over, and records for one worker's requests would reach another")
        return None

    @field_validator("peer_api_key_file")
    @classmethod
    def _key_file(cls, value: str | None) -> str | None:
        if value is not None:  # checked with the settings: unreadable or empty stops start-up, located
            from gateway.access import read_keys_file

            try:
                keys = read_keys_file(value)
            except OSError as e:
                raise ValueError(f"cannot read {value}: {e.strerror or e}") from None
            if not keys:
                raise ValueError(f"{value} holds no key")
        return value

    @field_validator("prefill", "decode", "standard")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not isinstance(item, str):
                raise ValueError(f"{item!r} is not a host:port string")
            split_host_port(item)
        return value

    @field_validator("d_inter_comm")
    @classmethod
    def _inter_comm(cls, value: dict[str, str]) -> dict[str, str]:
        for key, target in value.items():
            ip, sep, port = key.partition(";")
            if not sep or not is_host(ip.strip("[]")) or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{key!r} is not `ip;interCommPort`")
            split_host_port(target)
        return value

    @field_validator("trusted_peers")
    @classmethod
    def _peers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not isinstance(item, str) or not is_host(item):
                raise ValueError(f"{item!r} is not an IP address or a host name")
        return value

    @model_validator(mode="after")
    def _coordinator_needs_instances(self) -> PdConfig:
        if self.role == "coordinator" and (not self.prefill and not self.standard or not self.decode):
            raise ValueError("role coordinator needs `decode` and `prefill` (or `standard`) instance lists")
        return self
