"""The headers a coordinator puts on a P request, checked in MindIE's order with its messages.

MindIE Server (``HttpHandler::CheckDMIReqValid``): prefill role, all of ``req-type``/``req-id``/
``d-target`` present, ``req-id`` hex digits only and at most 1024 characters, ``req-type`` equal
to ``prefill``, ``d-target`` an IPv4 address (optionally ``;port``), ``is-recompute`` absent,
``true`` or ``false``. Every failure is 400 ``{"error": <message>, "error_type": "Bad Request"}``.
Beyond MindIE, ``d-target`` may also name D by an IPv6 address, as MindIE-MS writes one
(``::1;1121``, also ``[::1];1121``), or by DNS host name (``decode-0.pd;1025``: compose and
Kubernetes Services); anything else gets MindIE's IPv4 message.

Where P hands off: ``d-target``'s port is MindIE's ``interCommPort`` (D's P-D gRPC port), which
MindIE-MS sends together with ``d-port``, D's HTTP port. The hand-off here is HTTP on D's MindIE
port, so it goes to ``d-port`` when the header is there; else to the HTTP address
``dialects.mindie.pd.d_inter_comm`` maps ``ip;port`` to; else to ``d-target``'s port itself (the
gateway's own coordinator names D's HTTP port there); else to ``d_port``.
"""

from __future__ import annotations

import ipaddress
import string
from collections.abc import Mapping
from dataclasses import dataclass

from .peers import is_address, is_host

PD_HEADERS = ("req-type", "req-id", "d-target")
_HEX = set(string.hexdigits)


class BadPdRequest(Exception):
    """400 Bad Request with MindIE's message."""


@dataclass(frozen=True, slots=True)
class PdHeaders:
    req_id: str
    d_host: str
    d_port: int
    recompute: bool


def _ipv4(value: str) -> bool:
    try:
        ipaddress.IPv4Address(value)
        return True
    except ValueError:
        return False


def has_pd_headers(headers: Mapping[str, str]) -> bool:
    return any(h in headers for h in PD_HEADERS)


def check(headers: Mapping[str, str], default_d_port: int, inter_comm: Mapping[str, str] | None = None) -> PdHeaders:
    if not all(h in headers for h in PD_HEADERS):
        raise BadPdRequest("DMI request must have req-type, req-id, d-target headers")
    req_id = headers["req-id"]
    if not all(c in _HEX for c in req_id):
        raise BadPdRequest(f"Invalid req-id, the character of req-id should be hex char [0-9, a-f, A-F], but got {req_id}")
    if len(req_id) > 1024:
        raise BadPdRequest("The length of req-id cannot exceed 1024")
    if headers["req-type"] != "prefill":
        raise BadPdRequest(f"Parameter req-type must be prefill but got {headers['req-type']}")
    target = headers["d-target"]
    ip, sep, port = target.partition(";")
    ip = ip.strip()
    host = ip[1:-1] if ip.startswith("[") and ip.endswith("]") else ip
    if not _ipv4(host) and not is_address(host) and not (is_host(host) and not is_address(host)):
        raise BadPdRequest("Parameter d-target must be an IPv4 address")
    port = port.strip()
    if sep and not (port.isdigit() and 0 < int(port) < 65536):
        raise BadPdRequest("Parameter d-target must be an IPv4 address")  # MindIE checks only the ip
    recompute = headers.get("is-recompute", "")
    if recompute not in ("", "true", "false"):
        raise BadPdRequest("Parameter is-recompute is an optional parameter. When it is set, it must be true or false.")
    d_port = headers.get("d-port", "").strip()
    if d_port.isdigit() and 0 < int(d_port) < 65536:  # MindIE-MS: D's HTTP port beside its interCommPort
        return PdHeaders(req_id, host, int(d_port), recompute == "true")
    mapped = (inter_comm or {}).get(f"{host};{port}") if sep else None
    if mapped is not None:
        from .config import split_host_port

        m_host, m_port = split_host_port(mapped)
        return PdHeaders(req_id, m_host, m_port, recompute == "true")
    return PdHeaders(req_id, host, int(port) if sep else default_d_port, recompute == "true")
