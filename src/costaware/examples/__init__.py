"""Example data and models used by the example DAGs and benchmarks (real data, shipped in PyPI packages)."""
