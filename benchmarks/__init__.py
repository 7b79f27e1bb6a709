"""Throughput benchmarks for keras-bertology (not part of the installed package)."""
