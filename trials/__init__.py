"""Reliability trials: each script runs one trial and rewrites its section of RELIABILITY.md.

Performance benchmarks (BENCHMARKS.md) live in ``benchmarks/``; both use ``testing/``.
"""
