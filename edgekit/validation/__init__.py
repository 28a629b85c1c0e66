"""Compare an artifact with its reference, measure latency, write reports, apply gates."""
