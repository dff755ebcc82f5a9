"""Open trace files (chosen by content, not extension) into one DuckDB database.

``open_traces(paths)`` accepts Kineto Chrome-JSON (``.json``/``.json.gz``), Nsight Systems
SQLite exports, directories of such files (one per rank), or a database file that
wanscope wrote earlier with ``--db``. The connection it returns has the SQL macros the
analyses build on (``analysis/stdlib.sql``), created on it whichever way the database came.
"""

from __future__ import annotations

import atexit
import gzip
import os
import shutil
import stat
import tempfile
import zlib
from importlib import resources
from pathlib import Path

import duckdb

from wanscope.errors import InputError, UsageError, check_output, file_kind

SQLITE_MAGIC = b"SQLite format 3\x00"
# DuckDB's buffer limits: past them, table data and intermediates spill to a temporary
# directory, so peak memory stays bounded for traces of any size (measured:
# benchmarks/RESULTS.md, "analyze"). While traces are parsed: two threads' JSON buffers and
# one staging statement's rows (trace/kineto.py, _stage) fit under it beside the compressed
# tables, so the buffer pool seldom evicts. An eviction also purges the allocator's caches
# (DuckDB's Allocator::FlushAll), after which every buffer is faulted in afresh: at 136 MB the
# 522 MB benchmark trace paid for thousands of purges in system time (benchmarks/RESULTS.md,
# "2026-11-30: `analyze` vs HTA, compressed ingest").
INGEST_MEMORY_LIMIT = "200MB"
# ... once the traces are in (nesting, analyses, queries). cpu_ops comes out of the nesting's
# rewrite uncompressed and is compressed by a checkpoint at the end of ``link.finish``.
DUCKDB_MEMORY_LIMIT = "100MB"
# ... and while the nesting of host ranges holds its numpy arrays (trace/link.py).
NEST_MEMORY_LIMIT = "48MB"
# DuckDB's worker threads. The ingest limit holds two threads parsing JSON chunk files at
# once; on a machine with more cores DuckDB would start one per core and, at 3, the parse
# thrashed under its limit (136 MB then; benchmarks/RESULTS.md, "2026-11-30: `analyze` vs HTA
# after the nesting, staging and islands rewrite").
DUCKDB_THREADS = 2
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
    raise InputError(
        path,
        "not a trace: expected Kineto JSON (.json/.json.gz), an Nsight Systems SQLite export or a wanscope database",
    )


def _may_be_trace(path: Path) -> bool:
    """In a directory, JSON files that are not traces (the report.json that `wanscope
    profile` and `report` write beside their traces, a diff.json) are passed over: a Kineto
    trace names ``traceEvents`` within its first megabyte. Other files are judged later."""
    if not path.name.endswith((".json", ".json.gz")):
        return True
    try:
        if not path.stat().st_size:
            return True  # an empty rank file is an error (ingest says so), not a file passed over
        with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as f:
            return b'"traceEvents"' in f.read(1 << 20)
    except (OSError, EOFError, zlib.error):
        return True  # unreadable: let the ingest say what is wrong with it


def expand(paths: list[str | os.PathLike]) -> list[Path]:
    """Files to ingest: each path as given, a directory replaced by its trace files sorted by name.

    Raises:
        InputError: a path is missing, a symlink loop, unreadable, or not a regular file
            (a FIFO or a device would block or never end).
    """
    files: list[Path] = []
    for p in map(Path, paths):
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            raise InputError(p, "no such file") from None
        except OSError as e:
            raise InputError(p, f"cannot read: {e.strerror or e}") from None
        if stat.S_ISDIR(mode):
            try:
                inner = sorted(
                    q
                    for q in p.iterdir()
                    if q.is_file()
                    and not q.name.startswith(".")
                    and q.name.endswith(TRACE_SUFFIXES)
                    and _may_be_trace(q)
                )
            except OSError as e:
                raise InputError(p, f"cannot read the directory: {e.strerror or e}") from None
            if not inner:
                raise InputError(p, "directory holds no trace files (*.json, *.json.gz, *.sqlite)")
            files.extend(inner)
        elif not stat.S_ISREG(mode):
            raise InputError(p, f"is {file_kind(mode)}, not a regular file")
        else:
            files.append(p)
    return files


def _open_database(path: Path) -> duckdb.DuckDBPyConnection:
    """Open a database written by ``--db``, read-only, after checking it has every column
    of the canonical schema (a DuckDB file from another program or another layout would
    fail later, deep in an analysis query).

    Raises:
        InputError: unreadable (truncated, corrupt) or not wanscope's tables.
    """
    expected = duckdb.connect()
    expected.execute(schema_sql())
    columns_sql = "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main'"
    want = set(expected.execute(columns_sql).fetchall())
    expected.close()
    con = None
    try:
        con = duckdb.connect(str(path), read_only=True)
        have = set(con.execute(columns_sql).fetchall())
        # Read every block once (DuckDB checksums each): a truncated or corrupt file
        # fails here, not in the middle of an analysis (a few ms per 10 MB).
        for table in sorted({t for t, _ in have} & {t for t, _ in want}):
            con.execute(f'SELECT sum(hash("{table}")) FROM "{table}"').fetchall()
    except duckdb.Error as e:
        if con is not None:
            con.close()
        raise InputError(
            path, f"cannot open the DuckDB database ({str(e).splitlines()[0][:120]}); truncated or corrupt?"
        ) from None
    missing = sorted(want - have)
    if missing:
        con.close()
        if not {t for t, _ in have} & {t for t, _ in want}:
            raise InputError(path, "a DuckDB database without wanscope's tables")
        raise InputError(
            path, f"a DuckDB database whose tables are not wanscope's (no column {missing[0][0]}.{missing[0][1]})"
        )
    return con


def _check_db_target(db: Path, inputs: list[Path]) -> None:
    """``--db`` replaces an earlier database of wanscope's, never an input, a file of another
    kind or another program's DuckDB database."""
    check_output(db, inputs)
    if db.exists() and db.stat().st_size:
        with open(db, "rb") as f:
            if f.read(12)[8:12] != b"DUCK":
                raise InputError(
                    db, "exists and is not a DuckDB database; not replacing it (--db keeps the ingested database)"
                )
        try:
            with duckdb.connect(str(db), read_only=True) as con:
                ours = con.execute(
                    "SELECT count(*) FROM information_schema.tables "
                    "WHERE table_schema = 'main' AND table_name = 'sources'"
                ).fetchall()[0][0]
        except duckdb.Error as e:
            raise InputError(
                db,
                f"exists and cannot be opened as a DuckDB database ({str(e).splitlines()[0][:120]}); not replacing it",
            ) from None
        if not ours:
            raise InputError(
                db,
                "is a DuckDB database without wanscope's tables; not replacing it (--db keeps the ingested database)",
            )


def open_traces(paths, db: str | os.PathLike | None = None) -> duckdb.DuckDBPyConnection:
    """Ingest ``paths`` into a DuckDB database with the canonical schema and return it, with the
    macros of ``analysis/stdlib.sql`` created on the connection (TEMP macros: see
    ``analysis/stdlib.py``).

    Args:
        paths: trace files or directories (see the module docstring); a single database
            file written earlier by wanscope is opened as it is.
        db: keep the database in this file (replaced if it exists) instead of in memory.

    Raises:
        InputError: a file is missing, unreadable, of an unknown format or malformed.
    """
    from wanscope.analysis.stdlib import create_macros

    files = expand(list(paths))
    kinds = [sniff(f) for f in files]
    if "database" in kinds:
        if len(files) != 1:
            raise InputError(files[kinds.index("database")], "a wanscope database must be given alone")
        if db is not None:
            raise UsageError(
                f"--db {db}: {files[0]} is already a wanscope database; --db keeps the database of ingested traces"
            )
        con = _open_database(files[0])
        try:
            create_macros(con)
        except BaseException:
            con.close()
            raise
        return con
    tmp_db = None
    if db is not None:
        db = Path(db)
        _check_db_target(db, files)
        tmp_db = Path(f"{db}.tmp-{os.getpid()}")
    config = {"memory_limit": INGEST_MEMORY_LIMIT, "threads": DUCKDB_THREADS, "preserve_insertion_order": False}
    if tmp_db is None:
        spill = tempfile.mkdtemp(prefix="wanscope-spill-")
        atexit.register(shutil.rmtree, spill, ignore_errors=True)
        config["temp_directory"] = spill
    con = None
    try:  # from the first byte written to the rename: an interrupt leaves nothing behind
        if tmp_db:
            try:  # fail here, with the reason, where the database cannot be written
                os.close(os.open(tmp_db, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o666))
                tmp_db.unlink()
            except OSError as e:
                raise InputError(db, f"cannot write: {e.strerror or e}") from None
        con = duckdb.connect(str(tmp_db) if tmp_db else ":memory:", config=config)
        if tmp_db is None:
            # An in-memory database of its own with compression on (DuckDB >= 1.3): the
            # tables take ~7x less memory (cpu_ops of the 522 MB benchmark trace: 22 MB
            # instead of 154 MB) for a little CPU per row.
            con.execute("ATTACH ':memory:' AS traces (COMPRESS); USE traces")
        con.execute(schema_sql())
        for source_id, (path, kind) in enumerate(zip(files, kinds)):
            if kind == "nsys":
                from wanscope.trace import nsys

                nsys.ingest(con, path, source_id)
            else:
                from wanscope.trace import kineto

                kineto.ingest(con, path, source_id)
        from wanscope.trace.link import finish

        con.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
        finish(con, nest_memory_limit=NEST_MEMORY_LIMIT)
        if tmp_db:
            con.close()
            # Opened before the rename: a concurrent run replacing the same --db file cannot
            # hand this run the other's database (the open file survives the rename).
            con = duckdb.connect(str(tmp_db), read_only=True)
            os.replace(tmp_db, db)
        create_macros(con)
    except BaseException:
        if con is not None:
            con.close()
        if tmp_db:
            tmp_db.unlink(missing_ok=True)
            Path(f"{tmp_db}.wal").unlink(missing_ok=True)
        raise
    return con
