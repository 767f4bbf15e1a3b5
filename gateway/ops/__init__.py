"""What an operator calls: the admin listener, gRPC health, what `gateway check` finds."""
