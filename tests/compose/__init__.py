"""`make compose-test`: the compose stack checked from outside (scripts/compose-test.sh)."""
