"""Protocol gateway: legacy model-serving dialects over NVIDIA Triton (KServe V2 gRPC)."""

from gateway.process import grpcruntime as _grpcruntime

__version__ = "0.1.0"

_grpcruntime.configure()  # before anything imports grpc (gateway/process/grpcruntime.py)
