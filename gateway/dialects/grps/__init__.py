"""GRPS dialect: HTTP (7080) and gRPC (7081), one GrpsService per worker shared by both."""

from gateway.dialect import Dialect, ListenerSpec

from .config import GrpsSettings

DIALECT = Dialect(
    name="grps",
    listeners=(
        ListenerSpec("grps_http", 7080, "http", "GRPS HTTP", "gateway.dialects.grps.http:attach"),
        ListenerSpec("grps_grpc", 7081, "grpc", "GRPS gRPC", "gateway.dialects.grps.grpc:attach"),
    ),
    open="gateway.dialects.grps.service:open",
    config=GrpsSettings,
    check="gateway.dialects.grps.check:check",
)
