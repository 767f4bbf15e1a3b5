import grpc
import pytest

from gateway.core import errors
from gateway.core.errors import ErrorKind, GatewayError


@pytest.mark.parametrize(
    "code,kind",
    [
        (grpc.StatusCode.INVALID_ARGUMENT, ErrorKind.INVALID_ARGUMENT),
        (grpc.StatusCode.NOT_FOUND, ErrorKind.NOT_FOUND),
        (grpc.StatusCode.UNAVAILABLE, ErrorKind.UNAVAILABLE),
        (grpc.StatusCode.DEADLINE_EXCEEDED, ErrorKind.DEADLINE_EXCEEDED),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, ErrorKind.RESOURCE_EXHAUSTED),
        (grpc.StatusCode.CANCELLED, ErrorKind.CANCELLED),
        (grpc.StatusCode.UNIMPLEMENTED, ErrorKind.UNIMPLEMENTED),
        (grpc.StatusCode.INTERNAL, ErrorKind.UPSTREAM_FAILED),
        (grpc.StatusCode.UNKNOWN, ErrorKind.UPSTREAM_FAILED),
    ],
)
def test_triton_grpc_codes_map_to_error_kinds(code, kind):
    err = errors.from_grpc_code(code, "Request for unknown model: 'x' is not found")
    assert isinstance(err, GatewayError)
    assert err.kind is kind
    assert err.message == "Request for unknown model: 'x' is not found"


def test_every_grpc_status_code_is_mapped_explicitly():
    """No Triton status falls through to the default: each one was decided on purpose."""
    unmapped = [c.name for c in grpc.StatusCode if c is not grpc.StatusCode.OK and c not in errors._FROM_GRPC]
    assert unmapped == []


def test_client_mistakes_never_become_server_errors():
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND):
        kind = errors.from_grpc_code(code, "x").kind
        assert errors.HTTP_STATUS[kind] < 500, code


def test_default_tables_are_complete():
    errors.check_table(errors.HTTP_STATUS, "HTTP_STATUS")
    errors.check_table(errors.GRPC_STATUS, "GRPC_STATUS")


def test_check_table_names_what_is_missing():
    with pytest.raises(AssertionError, match="NOT_FOUND"):
        errors.check_table({ErrorKind.INVALID_ARGUMENT: 400}, "partial")
