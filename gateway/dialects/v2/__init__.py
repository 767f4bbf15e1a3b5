"""Native KServe V2: gRPC passed straight through to Triton as bytes; HTTP/REST translated into V2 gRPC."""

from gateway.dialect import Dialect, ListenerSpec

from .config import V2Config

DIALECT = Dialect(
    name="v2",
    listeners=(
        ListenerSpec("v2_grpc", 8001, "grpc", "KServe V2 gRPC passthrough",
                     "gateway.dialects.v2.passthrough:attach", generated_id_back=False),  # Triton stamps no id
        ListenerSpec("v2_http", 8000, "http", "KServe V2 HTTP/REST (Triton's HTTP API)",
                     "gateway.dialects.v2.http:attach", generated_id_back=False),
    ),
    open="gateway.dialects.v2.state:open",
    config=V2Config,
    check="gateway.dialects.v2.check:check",
)
