"""Ingest an Nsight Systems SQLite export into the canonical tables (``schema.sql``).

What goes where:

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> ``kernels`` (names through ``StringIds``:
  ``demangledName``, or ``shortName`` with ``kernel_names="short"``; shared memory is
  static + dynamic);
- ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` (graph-level tracing, one record per graph run) ->
  ``kernels`` as ``CUDA graph N (graph-level trace)``, counted as ``graph_trace``;
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` -> ``memops`` (copy kinds from
  ``ENUM_CUDA_MEMCPY_OPER``, or CUPTI's documented values for exports without it; ``name``
  is NVIDIA's operation name, e.g. ``[CUDA memcpy Device-to-Host]``, ``[CUDA memset]``);
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` (runtime and driver calls) -> ``api_calls``;
- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` -> ``cuda_syncs`` (kind from the waiting call:
  ``nsys_export.SYNC_KINDS``);
- NVTX push/pop and start/end ranges -> ``cpu_ops`` (kind ``nvtx``, for the shared
  analyses) and ``nvtx_ranges`` (the same ranges with their style and domain, for
  ``nvtx_sum``; ``link.finish`` renumbers ``cpu_ops.id``, so the two are not joined);
- ``PROFILER_OVERHEAD`` -> ``profiler_overhead``; CUDA contexts -> ``gpu_contexts``;
- ``TARGET_INFO_GPU`` -> ``devices``; export metadata -> ``meta``.

``globalPid``/``globalTid`` pack the process id in bits 24-47 and the thread id in bits
0-23 (Nsight Systems User Guide, "SQLite Schema Reference"; nsys's own reports decode
them the same way).

**Ranks.** An export can hold several processes. Each process that ran GPU work
(kernels, memcpy or memset) gets its own rank, in order of pid, starting at
``max(source_id, 1 + highest rank of the sources ingested before)``; a file with one such
process therefore has the rank of its position, like a Kineto file without
``distributedInfo``. Processes without GPU work (launchers, helpers) get the file's first
rank. ``sources.rank`` is the file's first rank; ``meta`` key ``ranks`` maps pid -> rank.

**Excluded records**, counted in ``ingest_warnings``: GPU and sync records with a zero
start or end, or times that are not positive integers (``no_timing``), any record ending
before it starts (``end_before_start``), kernels whose name id is not in ``StringIds``
(``malformed_event``), NVTX ranges never closed (``unterminated_range``). Counted and
kept: kernels, memcpys and memsets of zero duration (``zero_duration``), as in a Kineto trace.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import duckdb
import numpy as np

from wanscope.errors import InputError
from wanscope.trace import link, nsys_export
from wanscope.trace.nsys_export import DEGRADED_KEY, Export

# A CUDA API version suffix: "_v" and 4 or more digits at the very end (cudaMalloc_v3020).
_API_VERSION_SUFFIX = re.compile(r"_v\d{4,}$")
ID_STRIDE = 10**12  # cpu_ops.id = source_id * ID_STRIDE + row number


def _integers(*columns: str) -> str:
    """SQLite condition: every column holds an integer. SQLite stores whatever a writer
    gives it, so a damaged export can hold text, reals or blobs where nsys writes integers;
    such a record is excluded and counted like any record without usable times."""
    return " AND ".join(f"typeof({c}) = 'integer'" for c in columns)


def api_name(raw_name: str) -> str:
    """A CUDA API name without its trailing version suffix: ``cudaMalloc_v3020`` ->
    ``cudaMalloc``, ``cudaGetDeviceProperties_v2_v12000`` -> ``cudaGetDeviceProperties_v2``;
    ``cuGetProcAddress_v2`` stays itself (fewer than 4 digits)."""
    return _API_VERSION_SUFFIX.sub("", raw_name)


def ingest(con: duckdb.DuckDBPyConnection, path, source_id: int, kernel_names: str = "demangled") -> None:
    """Insert the records of the export at ``path`` into the canonical tables of ``con``.

    Args:
        con: DuckDB connection whose canonical tables exist (``load.schema_sql()``).
        path: the ``.sqlite`` file.
        source_id: index of the file among the inputs.
        kernel_names: ``demangled`` (default, as ``nsys stats`` prints them) or ``short``.

    Raises:
        InputError: not an SQLite database, truncated, not an nsys export, or a table
            without a column wanscope needs (named). A missing optional column (exports
            differ by version) is no error: that part is degraded and a note says how.
    """
    path = Path(path)
    export = nsys_export.open_export(path)
    try:
        _Ingest(con, export, path, source_id, kernel_names).run()
    except _MissingColumn as e:
        raise InputError(
            path,
            f"the export's {e.table} table has no {e.column} column, which wanscope needs: not an export nsys writes",
        ) from None
    except sqlite3.DatabaseError as e:
        raise InputError(path, f"cannot read the export ({e}); truncated or corrupt?") from None
    except (duckdb.Error, TypeError, ValueError, OverflowError) as e:
        # Values of a type nsys never writes (a name that is a blob, a device id that is a
        # huge real): the export is damaged beyond what per-record counting can absorb.
        raise InputError(
            path, f"values nsys never writes in the export ({str(e).splitlines()[0][:100]}); corrupt?"
        ) from None
    finally:
        export.con.close()


class _MissingColumn(Exception):
    def __init__(self, table: str, column: str):
        super().__init__(f"{table}.{column}")
        self.table, self.column = table, column


class _Ingest:
    def __init__(self, con, export: Export, path: Path, source_id: int, kernel_names: str):
        if kernel_names not in ("demangled", "short"):
            raise ValueError(f"kernel_names must be 'demangled' or 'short', not {kernel_names!r}")
        self.con, self.export, self.path, self.source_id = con, export, path, source_id
        self.kernel_names = kernel_names
        self.name_column = "demangledName" if kernel_names == "demangled" else "shortName"
        self.warnings: dict[str, int] = {}
        self.degraded: list[str] = []  # what optional columns the export lacks cost (_cols)
        self.event_count = 0
        self.kernel_table = export.table("CUPTI_ACTIVITY_KIND_KERNEL")
        self.memcpy_table = export.table("CUPTI_ACTIVITY_KIND_MEMCPY")
        self.memset_table = export.table("CUPTI_ACTIVITY_KIND_MEMSET")
        self.graph_table = export.table("CUPTI_ACTIVITY_KIND_GRAPH_TRACE")

    # --- plumbing -------------------------------------------------------------------

    def _cols(self, table: str, alias: str, required: tuple, optional: tuple = (), part: str = "") -> dict[str, str]:
        """SQL for the columns of ``table`` (``alias.column``) that a part reads: each
        ``required`` one as it is, each ``optional`` one or NULL where the export lacks it
        (exports differ by version), noting what that costs (``part``) in ``degraded``.

        Raises:
            _MissingColumn: a required column is not in the table.
        """
        have = self.export.columns(table)
        prefix = f"{alias}." if alias else ""
        for c in required:
            if c not in have:
                raise _MissingColumn(table, c)
        out = {c: f'{prefix}"{c}"' for c in required}
        lacking = [c for c in optional if c not in have]
        out.update({c: "NULL" if c in lacking else f'{prefix}"{c}"' for c in optional})
        if lacking:
            self.degraded.append(f"{table} has no {', '.join(lacking)} column{'s' if len(lacking) > 1 else ''}: {part}")
        return out

    def _warn(self, kind: str, count: int) -> None:
        if count:
            self.warnings[kind] = self.warnings.get(kind, 0) + count

    def _insert(self, table: str, names: list[str], select: str, rows: list[tuple], read: bool = True) -> None:
        """Insert ``rows`` (tuples in the order of ``names``) into ``table`` through
        ``INSERT INTO table SELECT {select} FROM rows``: a column-wise scan, since
        row-wise ``executemany`` into DuckDB is about 3,000 rows/s. ``read``: the rows
        are records of the file (counted in ``sources.event_count``), not derived."""
        if read:
            self.event_count += len(rows)
        if not rows:
            return
        columns = {n: np.array(c, dtype=object) for n, c in zip(names, zip(*rows))}
        view = f"_nsys_rows_{self.source_id}"
        self.con.register(view, columns)
        try:
            self.con.execute(f"INSERT INTO {table} SELECT {select} FROM {view}").fetchall()
        finally:
            self.con.unregister(view)

    def _timed(self, table: str, alias: str = "", zero_start: bool = False, activity: bool = False) -> str:
        """WHERE clause selecting the records of ``table`` (named ``alias`` in the query)
        with usable times, after counting the others into the warnings. GPU records need
        positive start and end; API calls (``zero_start``) only a start >= 0. Records of
        GPU activity (``activity``: kernels, memcpy, memset) of zero duration are kept and
        counted as ``zero_duration``."""
        ints = _integers("start", '"end"')
        bad, good = (
            ("start < 0", "start >= 0") if zero_start else ('start <= 0 OR "end" <= 0', 'start > 0 AND "end" > 0')
        )
        no_timing, backwards, zero = self.export.con.execute(
            f"SELECT count(*) FILTER (WHERE NOT ({ints}) OR {bad}), "
            f'count(*) FILTER (WHERE {ints} AND {good} AND "end" < start), '
            f'count(*) FILTER (WHERE {ints} AND {good} AND "end" = start) FROM "{table}"'
        ).fetchone()
        self._warn("no_timing", no_timing)
        self._warn("end_before_start", backwards)
        if activity:
            self._warn("zero_duration", zero)
        p = f"{alias}." if alias else ""
        start, end = f"{p}start", f'{p}"end"'
        # integers, start > 0 (>= 0) and end >= start: end - start fits in 64 bits
        return f"{_integers(start, end)} AND {start} {'>=' if zero_start else '>'} 0 AND {end} >= {start}"

    # --- ranks ----------------------------------------------------------------------

    def _assign_ranks(self) -> None:
        pids: set[int] = set()
        for table in (self.kernel_table, self.memcpy_table, self.memset_table, self.graph_table):
            if table:
                self._cols(table, "", ("globalPid", "deviceId", "streamId", "start", "end"))
                pids.update(
                    r[0]
                    for r in self.export.con.execute(f'SELECT DISTINCT (globalPid >> 24) & 16777215 FROM "{table}"')
                )
        used = self.con.execute(
            "SELECT max(rank) FROM (SELECT rank FROM sources UNION ALL SELECT rank FROM kernels UNION ALL SELECT rank FROM memops)"
        ).fetchall()[0][0]
        self.first_rank = max(self.source_id, -1 if used is None else used + 1)
        self.rank_of = {pid: self.first_rank + i for i, pid in enumerate(sorted(pids))}
        whens = " ".join(f"WHEN {pid} THEN {rank}" for pid, rank in self.rank_of.items())
        self.rank_sql = f"CASE pid {whens} ELSE {self.first_rank} END" if whens else str(self.first_rank)

    # --- tables ---------------------------------------------------------------------

    def run(self) -> None:
        self._assign_ranks()
        self.kernels()
        self.graph_traces()
        self.memops()
        self.api_calls()
        self.syncs()
        self.nvtx()
        self.overhead()
        self.contexts()
        self.devices()
        self.finish()

    def kernels(self) -> None:
        if not self.kernel_table:
            return
        table = self.kernel_table
        c = self._cols(
            table,
            "k",
            ("deviceId", "streamId", "start", "end", "globalPid", self.name_column),
            ("correlationId",),
            "kernels are not paired with their launches",
        )
        c.update(
            self._cols(
                table,
                "k",
                (),
                ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread"),
                "the kernels' launch configuration is unknown",
            )
        )
        c.update(
            self._cols(
                table,
                "k",
                (),
                ("staticSharedMemory", "dynamicSharedMemory"),
                "the kernels' shared memory is unknown",
            )
        )
        where = self._timed(table, "k", activity=True)
        rows = self.export.con.execute(
            f"""SELECT {c["deviceId"]}, {c["streamId"]}, k.start, k."end", s.value, {c["correlationId"]},
                       ({c["globalPid"]} >> 24) & 16777215, {c["gridX"]}, {c["gridY"]}, {c["gridZ"]},
                       {c["blockX"]}, {c["blockY"]}, {c["blockZ"]},
                       {c["registersPerThread"]}, {c["staticSharedMemory"]} + {c["dynamicSharedMemory"]}
                FROM "{table}" AS k LEFT JOIN StringIds AS s ON s.id = k."{self.name_column}"
                WHERE {where}"""
        ).fetchall()
        named = [r for r in rows if isinstance(r[4], str)]
        self._warn("malformed_event", len(rows) - len(named))  # name id not in StringIds
        self.event_count += len(rows) - len(named)
        rows = named
        names = [
            "device",
            "stream",
            "s",
            "e",
            "name",
            "corr",
            "pid",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "regs",
            "smem",
        ]
        self._insert(
            "kernels",
            names,
            f"""{self.rank_sql}, device::INTEGER, stream::BIGINT, s::BIGINT, e::BIGINT, (e - s)::BIGINT, name::VARCHAR,
                corr::BIGINT, pid::BIGINT, [grid_x, grid_y, grid_z]::INTEGER[], [block_x, block_y, block_z]::INTEGER[], regs::INTEGER, smem::BIGINT,
                NULL""",
            rows,
        )

    def graph_traces(self) -> None:
        """Graph-level records (``nsys --cuda-graph-trace=graph``): one per graph run, with no
        kernel records under it. Each goes into ``kernels`` as ``CUDA graph N (graph-level
        trace)``, so the run counts as busy time and pairs with its launch; counted as
        ``graph_trace``."""
        if not self.graph_table:
            return
        table = self.graph_table
        c = self._cols(table, "g", ("deviceId", "streamId", "start", "end", "globalPid"), ("correlationId", "graphId"))
        where = self._timed(table, "g", activity=True)
        rows = self.export.con.execute(
            f"""SELECT {c["deviceId"]}, {c["streamId"]}, g.start, g."end", {c["correlationId"]},
                       ({c["globalPid"]} >> 24) & 16777215, {c["graphId"]}
                FROM "{table}" AS g WHERE {where}"""
        ).fetchall()
        self._warn("graph_trace", len(rows))
        self._insert(
            "kernels",
            ["device", "stream", "s", "e", "corr", "pid", "graph"],
            f"""{self.rank_sql}, device::INTEGER, stream::BIGINT, s::BIGINT, e::BIGINT, (e - s)::BIGINT,
                'CUDA graph ' || coalesce(graph::VARCHAR, '?') || ' (graph-level trace)', corr::BIGINT, pid::BIGINT,
                NULL, NULL, NULL, NULL, NULL""",
            rows,
        )

    def memops(self) -> None:
        kinds, self.memcpy_labels = nsys_export.memcpy_kinds(self.export)
        names = ["kind", "copy_kind", "bytes", "name", "device", "stream", "s", "e", "corr", "pid"]
        select = f"""kind, copy_kind, bytes::BIGINT, name, {self.rank_sql}, device::INTEGER, stream::BIGINT,
                     s::BIGINT, e::BIGINT, (e - s)::BIGINT, corr::BIGINT, pid::BIGINT"""
        if self.memcpy_table:
            table = self.memcpy_table
            c = self._cols(table, "", ("deviceId", "streamId", "start", "end", "globalPid"))
            c.update(self._cols(table, "", (), ("copyKind",), "memcpys have no direction (kind unknown)"))
            c.update(self._cols(table, "", (), ("bytes",), "memcpy sizes are unknown"))
            c.update(self._cols(table, "", (), ("correlationId",), "memcpys are not paired with their calls"))
            where = self._timed(table, activity=True)
            rows = []
            for copy_kind, nbytes, device, stream, s, e, corr, pid in self.export.con.execute(
                f"""SELECT {c["copyKind"]}, {c["bytes"]}, deviceId, streamId, start, "end", {c["correlationId"]},
                           (globalPid >> 24) & 16777215
                    FROM "{table}" WHERE {where}"""
            ):
                short, label = kinds.get(copy_kind, (f"kind {copy_kind}", f"kind {copy_kind}"))
                rows.append(("memcpy", short, nbytes, f"[CUDA memcpy {label}]", device, stream, s, e, corr, pid))
            self._insert("memops", names, select, rows)
        if self.memset_table:
            table = self.memset_table
            c = self._cols(table, "", ("deviceId", "streamId", "start", "end", "globalPid"))
            c.update(self._cols(table, "", (), ("bytes",), "memset sizes are unknown"))
            c.update(self._cols(table, "", (), ("correlationId",), "memsets are not paired with their calls"))
            where = self._timed(table, activity=True)
            rows = self.export.con.execute(
                f"""SELECT 'memset', NULL, {c["bytes"]}, '[CUDA memset]', deviceId, streamId, start, "end",
                           {c["correlationId"]}, (globalPid >> 24) & 16777215
                    FROM "{table}" WHERE {where}"""
            ).fetchall()
            self._insert("memops", names, select, rows)

    def api_calls(self) -> None:
        table = self.export.table("CUPTI_ACTIVITY_KIND_RUNTIME")
        if not table:
            return
        c = self._cols(table, "r", ("nameId", "globalTid", "start", "end"))
        c.update(
            self._cols(table, "r", (), ("correlationId",), "API calls are not paired with the GPU work they launched")
        )
        valid = self._timed(table, "r", zero_start=True)
        rows = []
        for raw, pid, tid, s, e, corr in self.export.con.execute(
            f"""SELECT s.value, (r.globalTid >> 24) & 16777215, r.globalTid & 16777215, r.start, r."end", {c["correlationId"]}
                FROM "{table}" AS r JOIN StringIds AS s ON s.id = r.nameId
                WHERE {valid}"""
        ):
            kind = "runtime" if raw.startswith("cuda") else "driver"
            rows.append((kind, api_name(raw), raw, pid, tid, s, e, corr))
        self._insert(
            "api_calls",
            ["kind", "name", "raw", "pid", "tid", "s", "e", "corr"],
            f"kind, name, raw, {self.rank_sql}, pid::BIGINT, tid::BIGINT, s::BIGINT, e::BIGINT, (e - s)::BIGINT, corr::BIGINT",
            rows,
        )

    def syncs(self) -> None:
        table = self.export.table("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        if not table:
            return
        c = self._cols(table, "y", ("deviceId", "streamId", "start", "end", "globalPid"))
        c.update(self._cols(table, "y", (), ("correlationId",), "what each synchronization waited on is unknown"))
        valid = self._timed(table, "y")
        runtime = self.export.table("CUPTI_ACTIVITY_KIND_RUNTIME")
        if runtime and (
            c["correlationId"] == "NULL" or not {"correlationId", "globalTid", "nameId"} <= self.export.columns(runtime)
        ):
            runtime = None
        # The waiting call, same correlation id in the same process (SQLite indexes the join itself).
        waiter = (
            f"""LEFT JOIN "{runtime}" AS r ON r.correlationId = y.correlationId AND (r.globalTid >> 24) = (y.globalPid >> 24)
                LEFT JOIN StringIds AS s ON s.id = r.nameId"""
            if runtime
            else "LEFT JOIN (SELECT NULL AS value) AS s ON false"
        )
        rows = [
            (nsys_export.SYNC_KINDS.get(api_name(call or ""), "unknown"), *rest)
            for call, *rest in self.export.con.execute(
                f"""SELECT s.value, y.deviceId, y.streamId, y.start, y."end", {c["correlationId"]},
                           (y.globalPid >> 24) & 16777215
                    FROM "{table}" AS y {waiter} WHERE {valid}"""
            )
        ]
        self._insert(
            "cuda_syncs",
            ["kind", "device", "stream", "s", "e", "corr", "pid"],
            f"kind, {self.rank_sql}, device::INTEGER, stream::BIGINT, s::BIGINT, e::BIGINT, corr::BIGINT, pid::BIGINT",
            rows,
        )

    def nvtx(self) -> None:
        table = self.export.table("NVTX_EVENTS")
        if not table:
            return
        con = self.export.con
        c = self._cols(table, "n", ("eventType", "start", "end", "globalTid"))
        have = self.export.columns(table)
        if not {"text", "textId"} & have:
            raise _MissingColumn(table, "text")
        # The range's name: inline text, or a StringIds id (exports hold one or both).
        text = "n.text" if "text" in have else "NULL"
        strings = (
            'LEFT JOIN StringIds AS s ON s.id = n."textId"'
            if "textId" in have
            else ("LEFT JOIN (SELECT NULL AS value) AS s ON false")
        )
        c.update(self._cols(table, "n", (), ("domainId",), "NVTX ranges have no domain"))
        domains = (
            {
                (pid, domain_id): name
                for pid, domain_id, name in con.execute(
                    f"""SELECT (n.globalTid >> 24) & 16777215, n.domainId, coalesce({text}, s.value)
                        FROM "{table}" AS n {strings}
                        WHERE n.eventType = {nsys_export.NVTX_DOMAIN_CREATE}"""
                )
            }
            if c["domainId"] != "NULL"
            else {}
        )
        types = ", ".join(map(str, nsys_export.NVTX_RANGE_STYLES))
        unterminated, zero, backwards = con.execute(
            f"""SELECT count(*) FILTER (WHERE "end" IS NULL),
                       count(*) FILTER (WHERE typeof(start) <> 'integer' OR start <= 0
                                        OR ("end" IS NOT NULL AND typeof("end") <> 'integer')),
                       count(*) FILTER (WHERE {_integers("start", '"end"')} AND start > 0 AND "end" < start)
                FROM "{table}" WHERE eventType IN ({types})"""
        ).fetchone()
        self._warn("unterminated_range", unterminated)
        self._warn("no_timing", zero)
        self._warn("end_before_start", backwards)
        rows = []
        for n, (event_type, name, pid, tid, domain_id, s, e) in enumerate(
            con.execute(
                f"""SELECT n.eventType, coalesce({text}, s.value), (n.globalTid >> 24) & 16777215, n.globalTid & 16777215,
                           {c["domainId"]}, n.start, n."end"
                    FROM "{table}" AS n {strings}
                    WHERE n.eventType IN ({types}) AND {_integers("n.start", 'n."end"')} AND n.start > 0 AND n."end" >= n.start
                    ORDER BY n.start, n.rowid"""
            )
        ):
            style = nsys_export.NVTX_RANGE_STYLES[event_type]
            rows.append((self.source_id * ID_STRIDE + n, name, pid, tid, s, e, style, domains.get((pid, domain_id))))
        names = ["id", "name", "pid", "tid", "s", "e", "style", "domain"]
        self._insert(
            "cpu_ops",
            names,
            f"""id::BIGINT, NULL::BIGINT, NULL::INTEGER, 'nvtx', name::VARCHAR, {self.rank_sql}, pid::BIGINT, tid::BIGINT,
                s::BIGINT, e::BIGINT, (e - s)::BIGINT, NULL::BIGINT, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR""",
            rows,
        )
        self._insert(
            "nvtx_ranges",
            names,
            f"""{self.source_id}, {self.rank_sql}, pid::BIGINT, tid::BIGINT, style::VARCHAR, domain::VARCHAR, name::VARCHAR,
                s::BIGINT, e::BIGINT, (e - s)::BIGINT""",
            rows,
            read=False,
        )

    def overhead(self) -> None:
        table = self.export.table("PROFILER_OVERHEAD")
        if not table:
            return
        if not {"nameId", "globalTid", "start", "end"} <= self.export.columns(table):
            self.degraded.append(f"{table} lacks columns wanscope reads: the profiler's overhead is not listed")
            return
        rows = self.export.con.execute(
            f"""SELECT s.value, (o.globalTid >> 24) & 16777215, o.globalTid & 16777215, o.start, o."end"
                FROM "{table}" AS o LEFT JOIN StringIds AS s ON s.id = o.nameId
                WHERE {_integers("o.start", 'o."end"')} AND o.start >= 0 AND o."end" >= o.start"""
        ).fetchall()
        self._insert(
            "profiler_overhead",
            ["name", "pid", "tid", "s", "e"],
            f"{self.source_id}, name::VARCHAR, {self.rank_sql}, pid::BIGINT, tid::BIGINT, s::BIGINT, e::BIGINT, (e - s)::BIGINT",
            rows,
        )

    def contexts(self) -> None:
        tables = [t for t in (self.kernel_table, self.memcpy_table, self.memset_table) if t]
        parts = [
            f'SELECT DISTINCT (globalPid >> 24) & 16777215, deviceId, {c["contextId"]} FROM "{t}"'
            for t in tables
            for c in [self._cols(t, "", (), ("contextId",), "GPU contexts are unknown")]
        ]
        if not parts:
            return
        rows = self.export.con.execute(" UNION ".join(parts)).fetchall()
        self._insert(
            "gpu_contexts",
            ["pid", "device", "context"],
            f"{self.source_id}, {self.rank_sql}, pid::BIGINT, device::INTEGER, context::BIGINT",
            rows,
            read=False,
        )

    def devices(self) -> None:
        used = self.con.execute(
            """SELECT DISTINCT rank, device FROM (
                    SELECT rank, device FROM kernels UNION ALL SELECT rank, device FROM memops)
                WHERE rank IN (SELECT unnest(?::INTEGER[])) ORDER BY 1, 2""",
            [sorted(set(self.rank_of.values())) or [self.first_rank]],
        ).fetchall()
        props: dict[int, tuple] = {}
        if "TARGET_INFO_GPU" in self.export.tables and "id" in self.export.columns("TARGET_INFO_GPU"):
            c = self._cols(
                "TARGET_INFO_GPU",
                "",
                ("id",),
                ("name", "computeMajor", "computeMinor", "smCount", "totalMemory", "memoryBandwidth"),
                "some device properties are unknown",
            )
            for row in self.export.con.execute(
                f"""SELECT id, {c["name"]}, {c["computeMajor"]} || '.' || {c["computeMinor"]}, {c["smCount"]},
                           {c["totalMemory"]}, {c["memoryBandwidth"]}
                   FROM TARGET_INFO_GPU ORDER BY id"""
            ):
                props.setdefault(row[0], row[1:])
        rows = []
        for rank, device in used:
            name, cc, sms, memory, bandwidth = props.get(device, (None,) * 5)
            rows.append((rank, device, name, cc, sms, memory, None if bandwidth is None else bandwidth / 1e9))
        self._insert(
            "devices",
            ["rank", "device", "name", "cc", "sms", "memory", "gbps"],
            "rank::INTEGER, device::INTEGER, name::VARCHAR, cc::VARCHAR, sms::INTEGER, memory::BIGINT, NULL::DOUBLE, gbps::DOUBLE",
            rows,
            read=False,
        )

    def finish(self) -> None:
        clipped, partial = link.clip_overruns(self.con, sorted(set(self.rank_of.values())))
        self._warn("clipped_duration", clipped)
        meta = {
            "producer": "nsys",
            "nsys_version": self.export.meta.get("EXPORT_PRODUCT_VERSION", "unknown (export has no metadata table)"),
            "export_schema_version": self.export.meta.get("EXPORT_SCHEMA_VERSION", "unknown"),
            "export_meta_table": self.export.meta_table or "none",
            "kernel_names": self.kernel_names,
            "memcpy_kind_labels": getattr(self, "memcpy_labels", "n/a"),
            "ranks": json.dumps({str(pid): rank for pid, rank in self.rank_of.items()}),
        }
        if partial:
            meta[link.PARTIAL_OVERLAPS_KEY] = str(partial)
        if self.degraded:
            meta[DEGRADED_KEY] = json.dumps(self.degraded)
        if not self.rank_of:
            meta["gpu_activity"] = "none: the export holds no kernel, memcpy or memset records"
        rows = {
            "meta": [(self.source_id, k, v) for k, v in meta.items()],
            "ingest_warnings": [(self.source_id, k, n) for k, n in sorted(self.warnings.items())],
            "sources": [(self.source_id, str(self.path), "nsys", self.first_rank, self.event_count)],
        }
        for table, values in rows.items():
            if values:
                marks = ", ".join("?" * len(values[0]))
                self.con.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
