"""Benchmark scripts (run as ``python bench/<name>.py`` or ``python -m bench.<name>``); not installed."""
