"""Benchmarks for MixPR: long-context task generators, a recall table and a speed table (issue #2)."""
