"""Benchmarks: speed, latency, load and classroom figures, printed and written where the project
keeps them (metrics.json, model cards, README.md). Run as `python -m benchmarks.<name> [--write]`."""
