"""Trace ingest: every source format normalized once into the canonical schema
(``schema.sql``) in an embedded DuckDB database. Analyses never see source formats."""

from wanscope.trace.load import open_traces

__all__ = ["open_traces"]
