"""The worker process: CPUs, malloc, gRPC's runtime, state shared between workers, file watching, the offload pool."""
