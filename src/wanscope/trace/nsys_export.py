"""What an Nsight Systems SQLite export holds: its schema version, tables, columns and enums.

Exports from 2021 to 2026 differ (the test fixtures hold one schema per version, read by ``tests/trace/test_nsys_ingest.py``): a table is
written only when it has data, columns are added over time, the export metadata table
was ``EXPORT_META_DATA`` (2023.2) then ``META_DATA_EXPORT`` (2023.3 on) and is absent
before, and the ``ENUM_*`` label tables first appear in 2023. Readers ask this module
what exists instead of assuming a version.

Reference: NVIDIA Nsight Systems User Guide, "Exporter" / "SQLite Schema Reference".
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from wanscope.errors import InputError

# The values of CUPTI's CUpti_ActivityMemcpyKind (cupti_activity.h), which
# ENUM_CUDA_MEMCPY_OPER labels in exports from 2023 on: id -> (canonical copy_kind, NVIDIA label).
MEMCPY_KINDS: dict[int, tuple[str, str]] = {
    0: ("Unknown", "Unknown"),
    1: ("HtoD", "Host-to-Device"),
    2: ("DtoH", "Device-to-Host"),
    3: ("HtoA", "Host-to-Array"),
    4: ("AtoH", "Array-to-Host"),
    5: ("AtoA", "Array-to-Array"),
    6: ("AtoD", "Array-to-Device"),
    7: ("DtoA", "Device-to-Array"),
    8: ("DtoD", "Device-to-Device"),
    9: ("HtoH", "Host-to-Host"),
    10: ("PtoP", "Peer-to-Peer"),
    11: ("UVM HtoD", "Unified Host-to-Device"),
    12: ("UVM DtoH", "Unified Device-to-Host"),
    13: ("UVM DtoD", "Unified Device-to-Device"),
}

# What a CUDA synchronization record waited on, from the call that waited (joined by
# correlation id within the process), in the canonical cuda_syncs.kind vocabulary. The
# record's own syncType cannot be trusted across versions: in the fixtures,
# cudaStreamSynchronize is 2 in 2024.6-2025.3 exports, 3 in 2026.2 (CUPTI's
# CUpti_ActivitySynchronizationType order), while the 2021 export has
# cudaDeviceSynchronize as 1 and cudaEventSynchronize as 2, whatever ENUM_CUPTI_SYNC_TYPE says.
SYNC_KINDS: dict[str, str] = {
    "cudaStreamSynchronize": "stream",
    "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event",
    "cuEventSynchronize": "event",
    "cudaEventQuery": "event",
    "cuEventQuery": "event",
    "cudaStreamWaitEvent": "stream_wait_event",
    "cuStreamWaitEvent": "stream_wait_event",
    "cudaDeviceSynchronize": "context",
    "cudaThreadSynchronize": "context",
    "cuCtxSynchronize": "context",
}

# NVTX_EVENTS.eventType values for ranges (ENUM_NSYS_EVENT_TYPE): id -> NVIDIA's "Style".
NVTX_RANGE_STYLES: dict[int, str] = {59: "PushPop", 60: "StartEnd", 70: "PushPop", 71: "StartEnd"}
NVTX_DOMAIN_CREATE = 75

# meta key of a source: what the optional columns its export lacks cost (a JSON list of
# sentences, each "TABLE has no COLUMN column: what is lost"), for the analysis' notes.
DEGRADED_KEY = "wanscope_degraded"

# Tables whose presence identifies an Nsight Systems export (any one of them).
_NSYS_MARKERS = (
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "TARGET_INFO_SESSION_START_TIME",
    "ThreadNames",
    "ProcessStreams",
)


@dataclass(frozen=True)
class Export:
    """An opened export: its connection, table names and metadata.

    Attributes:
        con: read-only sqlite3 connection.
        tables: names of all tables.
        meta_table: META_DATA_EXPORT, EXPORT_META_DATA, or None (exports before 2023.2).
        meta: the export metadata as name -> value (empty without a metadata table).
    """

    con: sqlite3.Connection
    tables: frozenset[str]
    meta_table: str | None
    meta: dict[str, str]

    def table(self, base: str) -> str | None:
        """The table holding ``base``'s records: the exact name, else the one name that
        extends it with a suffix (``base_...``), else None (no such records captured)."""
        if base in self.tables:
            return base
        extended = sorted(t for t in self.tables if t.startswith(base + "_"))
        return extended[0] if len(extended) == 1 else None

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}


def open_export(path: Path) -> Export:
    """Open ``path`` read-only as an Nsight Systems export.

    Raises:
        InputError: not an SQLite database, truncated or corrupt, or a database from
            another tool (none of the tables every nsys export has).
    """
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        tables = frozenset(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    except sqlite3.DatabaseError as e:
        raise InputError(path, f"not a readable SQLite database ({e})") from None
    if "StringIds" not in tables or not tables.intersection(_NSYS_MARKERS):
        con.close()
        raise InputError(path, "an SQLite database, but not an Nsight Systems export (no StringIds/ThreadNames tables)")
    meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in tables), None)
    meta = dict(con.execute(f"SELECT name, value FROM {meta_table}").fetchall()) if meta_table else {}
    return Export(con, tables, meta_table, meta)


def memcpy_kinds(export: Export) -> tuple[dict[int, tuple[str, str]], str]:
    """Memcpy kinds id -> (copy_kind, label), and where the labels came from.

    From ENUM_CUDA_MEMCPY_OPER when the export has it; else (exports before 2023) the
    documented CUPTI values in ``MEMCPY_KINDS``."""
    if "ENUM_CUDA_MEMCPY_OPER" not in export.tables:
        return MEMCPY_KINDS, "documented CUPTI enum (export has no ENUM_CUDA_MEMCPY_OPER)"
    kinds = dict(MEMCPY_KINDS)
    for id_, label in export.con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER"):
        short = MEMCPY_KINDS.get(id_, (label, label))[0]
        kinds[id_] = (short, label)
    return kinds, "ENUM_CUDA_MEMCPY_OPER"
