"""What every layer reports through: Prometheus metrics, log lines, traces."""
