"""TensorFlow Serving dialect: REST (8501) and gRPC (8500), one Service per worker shared by both."""

from gateway.dialect import Dialect, ListenerSpec

from .config import TFServingConfig

DIALECT = Dialect(
    name="tfserving",
    listeners=(
        ListenerSpec("tfserving_grpc", 8500, "grpc", "TensorFlow Serving gRPC",
                     "gateway.dialects.tfserving.grpc:attach"),
        # TF Serving's --rest_api_timeout_in_ms defaults to 30 s
        ListenerSpec("tfserving_rest", 8501, "http", "TensorFlow Serving REST",
                     "gateway.dialects.tfserving.http:attach", timeout_s=30.0),
    ),
    open="gateway.dialects.tfserving.service:open",
    config=TFServingConfig,
    check="gateway.dialects.tfserving.check:check",
)
