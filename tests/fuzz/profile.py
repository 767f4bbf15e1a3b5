"""The one hypothesis setting every fuzz test uses.

``make test`` runs a modest, derandomized (reproducible) number of examples per property; a deep
run sets ``FUZZ_EXAMPLES`` (e.g. ``FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests/fuzz``),
which also turns on random seeds and hypothesis's example database so failures are replayed.
"""

from __future__ import annotations

import os

from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, settings

from gateway.core.errors import GatewayError

DEEP = int(os.environ.get("FUZZ_EXAMPLES", "0") or 0)

FUZZ = settings(
    max_examples=DEEP or 60,
    derandomize=not DEEP,
    database=settings.default.database if DEEP else None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

# An error text the gateway writes is built from bounded prefixes of what the client sent; any
# text longer than this echoes the request (issue 13: a 16 MB body rendered whole into a 400).
MAX_ERROR_TEXT = 2048


def decoded(message_type, raw: bytes):
    """``raw`` parsed as ``message_type``, or None where protobuf refuses it (grpc's deserializer
    would, before the gateway runs)."""
    try:
        return message_type.FromString(raw)
    except DecodeError:
        return None


def clean(err: GatewayError) -> GatewayError:
    """Assert an error is a client-facing GatewayError with a bounded text; returns it."""
    assert isinstance(err, GatewayError), repr(err)
    assert isinstance(err.message, str)
    assert len(err.message) <= MAX_ERROR_TEXT, (len(err.message), err.message[:300])
    return err
