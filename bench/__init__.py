"""Benchmarks and the model zoo: torch architectures exported with pnnx."""
