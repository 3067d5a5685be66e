"""Benchmarks (not tests): ``python -m bench.engine``. Results go to ``bench-out/``."""
