"""Benchmarks: `make bench` runs them all and prints their figures."""
