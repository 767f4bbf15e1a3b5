"""Native KServe V2 gRPC, passed straight through to Triton as bytes."""

from gateway.dialect import Dialect, ListenerSpec

from .config import V2Config

DIALECT = Dialect(
    name="v2",
    listeners=(
        ListenerSpec("v2_grpc", 8001, "grpc", "KServe V2 gRPC passthrough",
                     "gateway.dialects.v2.passthrough:attach"),
    ),
    open="gateway.dialects.v2.passthrough:open",
    config=V2Config,
    check="gateway.dialects.v2.check:check",
)
