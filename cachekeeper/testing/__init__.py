"""Conformance suites that ship with cachekeeper, so plugin stores and backends can run them under pytest."""
