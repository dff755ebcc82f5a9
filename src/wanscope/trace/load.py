"""Open trace files (chosen by content, not extension) into one DuckDB database.

``open_traces(paths)`` accepts Kineto Chrome-JSON (``.json``/``.json.gz``), Nsight Systems
SQLite exports, directories of such files (one per rank), or a database file that
wanscope wrote earlier with ``--db``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

import duckdb

from wanscope.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
# DuckDB's buffer limit: past it, table data and intermediates spill to a temporary
# directory, so peak memory stays bounded for traces of any size (measured:
# benchmarks/RESULTS.md, "analyze").
DUCKDB_MEMORY_LIMIT = "160MB"
GZIP_MAGIC = b"\x1f\x8b"
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")


def schema_sql() -> str:
    """The canonical schema's DDL (package data ``trace/schema.sql``)."""
    return resources.files("wanscope.trace").joinpath("schema.sql").read_text()


def sniff(path: Path) -> str:
    """Return the format of a file from its first bytes: kineto, kineto-gz, nsys or database.

    Raises:
        InputError: unreadable, empty, or none of the known formats.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except IsADirectoryError:
        raise InputError(path, "is a directory with no trace files") from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    if not head:
        raise InputError(path, "empty file")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head[8:12] == b"DUCK":
        return "database"
    if head.startswith(GZIP_MAGIC):
        return "kineto-gz"
    if head.lstrip()[:1] == b"{":
        return "kineto"
    raise InputError(path, "not a trace: expected Kineto JSON (.json/.json.gz), an Nsight Systems SQLite export or a wanscope database")


def expand(paths: list[str | os.PathLike]) -> list[Path]:
    """Files to ingest: each path as given, a directory replaced by its trace files sorted by name."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            inner = sorted(q for q in p.iterdir() if q.is_file() and not q.name.startswith(".") and q.name.endswith(TRACE_SUFFIXES))
            if not inner:
                raise InputError(p, "directory holds no trace files (*.json, *.json.gz, *.sqlite)")
            files.extend(inner)
        elif not p.exists():
            raise InputError(p, "no such file")
        else:
            files.append(p)
    return files


def open_traces(paths, db: str | os.PathLike | None = None) -> duckdb.DuckDBPyConnection:
    """Ingest ``paths`` into a DuckDB database with the canonical schema and return it.

    Args:
        paths: trace files or directories (see the module docstring); a single database
            file written earlier by wanscope is opened as it is.
        db: keep the database in this file (replaced if it exists) instead of in memory.

    Raises:
        InputError: a file is missing, unreadable, of an unknown format or malformed.
    """
    files = expand(list(paths))
    kinds = [sniff(f) for f in files]
    if "database" in kinds:
        if len(files) != 1:
            raise InputError(files[kinds.index("database")], "a wanscope database must be given alone")
        con = duckdb.connect(str(files[0]), read_only=True)
        tables = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
        if "kernels" not in tables or "cpu_ops" not in tables:
            con.close()
            raise InputError(files[0], "a DuckDB database without wanscope's tables")
        return con
    tmp_db = None
    if db is not None:
        tmp_db = Path(f"{db}.tmp-{os.getpid()}")
        tmp_db.unlink(missing_ok=True)
    config = {"memory_limit": DUCKDB_MEMORY_LIMIT, "preserve_insertion_order": False}
    if tmp_db is None:
        spill = tempfile.mkdtemp(prefix="wanscope-spill-")
        atexit.register(shutil.rmtree, spill, ignore_errors=True)
        config["temp_directory"] = spill
    con = duckdb.connect(str(tmp_db) if tmp_db else ":memory:", config=config)
    try:
        con.execute(schema_sql())
        for source_id, (path, kind) in enumerate(zip(files, kinds)):
            if kind == "nsys":
                from wanscope.trace import nsys

                nsys.ingest(con, path, source_id)
            else:
                from wanscope.trace import kineto

                kineto.ingest(con, path, source_id)
        from wanscope.trace.link import finish

        finish(con)
    except BaseException:
        con.close()
        if tmp_db:
            tmp_db.unlink(missing_ok=True)
        raise
    if tmp_db:
        con.close()
        os.replace(tmp_db, db)
        con = duckdb.connect(str(db), read_only=True)
    return con
