"""The headers a coordinator puts on a P request, checked in MindIE's order with its messages.

MindIE Server (``HttpHandler::CheckDMIReqValid``): prefill role, all of ``req-type``/``req-id``/
``d-target`` present, ``req-id`` hex digits only and at most 1024 characters, ``req-type`` equal
to ``prefill``, ``d-target`` an IPv4 address (optionally ``;port``), ``is-recompute`` absent,
``true`` or ``false``. Every failure is 400 ``{"error": <message>, "error_type": "Bad Request"}``.
Beyond MindIE, ``d-target`` may also name D by DNS host name (``decode-0.pd;1025``: compose and
Kubernetes Services); anything else gets MindIE's IPv4 message.
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


def check(headers: Mapping[str, str], default_d_port: int) -> PdHeaders:
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
    if not _ipv4(ip) and not (is_host(ip) and not is_address(ip)):
        raise BadPdRequest("Parameter d-target must be an IPv4 address")
    if sep and not (port.isdigit() and 0 < int(port) < 65536):
        raise BadPdRequest("Parameter d-target must be an IPv4 address")  # MindIE checks only the ip
    recompute = headers.get("is-recompute", "")
    if recompute not in ("", "true", "false"):
        raise BadPdRequest("Parameter is-recompute is an optional parameter. When it is set, it must be true or false.")
    return PdHeaders(req_id, ip, int(port) if sep else default_d_port, recompute == "true")
