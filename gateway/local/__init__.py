"""The local CPU Triton that `make run` and the tests start, and the launchers around it."""
