"""Nsight Systems exports whose optional columns differ (versions add and drop columns;
``NVTX_EVENTS`` holds inline ``text``, a ``textId``, or both) are read: a missing optional
column degrades that part with a note naming it; only a missing required column is an
error, one line that names the table and the column. Such exports were called "truncated
or corrupt"."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys

import pytest
from shared_fixtures import shared_fixture

from wanscope.analysis.summary import analyze
from wanscope.errors import InputError
from wanscope.trace import open_traces

NVTX = "nsys/nsightful_power_iteration__baseline.sqlite"  # NVTX ranges, kernels, memcpys
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def without(tmp_path, fixture: str, table: str, drop: set[str], names: str | None = None):
    """A copy of ``fixture`` whose ``table`` lacks the columns ``drop`` (rebuilt without
    them). ``names``: every NVTX name first moved ``inline`` (into ``text``) or
    ``registered`` (into StringIds, by ``textId``)."""
    path = tmp_path / "export.sqlite"
    shutil.copy(shared_fixture(fixture), path)
    db = sqlite3.connect(path)
    if names == "inline":
        db.execute(
            "UPDATE NVTX_EVENTS SET text = coalesce(text, (SELECT value FROM StringIds WHERE id = NVTX_EVENTS.textId))"
        )
    elif names == "registered":
        (top,) = db.execute("SELECT max(id) FROM StringIds").fetchone()
        for rowid, text in db.execute("SELECT rowid, text FROM NVTX_EVENTS WHERE text IS NOT NULL").fetchall():
            top += 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", [top, text])
            db.execute("UPDATE NVTX_EVENTS SET textId = ?, text = NULL WHERE rowid = ?", [top, rowid])
    cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})") if r[1] not in drop]
    assert len(cols) + len(drop) == len(list(db.execute(f"PRAGMA table_info({table})")))
    quoted = ", ".join(f'"{c}"' for c in cols)
    db.execute(f"CREATE TABLE _copy AS SELECT {quoted} FROM {table}")
    db.execute(f"DROP TABLE {table}")
    db.execute(f"ALTER TABLE _copy RENAME TO {table}")
    db.commit()
    db.close()
    return path


def nvtx_ranges(con) -> list[tuple]:
    return con.execute(
        "SELECT name, start_ns, end_ns, tid FROM cpu_ops WHERE kind = 'nvtx' ORDER BY start_ns, name"
    ).fetchall()


@pytest.fixture(scope="module")
def original():
    con = open_traces([shared_fixture(NVTX)])
    return con, analyze(con)


@pytest.mark.parametrize("drop, names", [({"textId"}, "inline"), ({"text"}, "registered")])
def test_nsys_optional_columns_nvtx_names_either_way(tmp_path, original, drop, names):
    con0, r0 = original
    ranges = nvtx_ranges(con0)
    assert ranges and all(name for name, *_ in ranges)
    con = open_traces([without(tmp_path, NVTX, "NVTX_EVENTS", drop, names)])
    assert nvtx_ranges(con) == ranges
    r = analyze(con)
    assert r["devices"] == r0["devices"] and r["notes"] == r0["notes"]


@pytest.mark.parametrize(
    "drop, lost",
    [
        ({"registersPerThread"}, "launch configuration is unknown"),
        ({"correlationId"}, "not paired with their launches"),
        ({"staticSharedMemory", "dynamicSharedMemory"}, "shared memory is unknown"),
    ],
)
def test_nsys_optional_columns_missing_degrade_with_a_note(tmp_path, original, drop, lost):
    _, r0 = original
    path = without(tmp_path, NVTX, KERNELS, drop)
    con = open_traces([path])
    r = analyze(con)
    assert [d["kernel_count"] for d in r["devices"]] == [d["kernel_count"] for d in r0["devices"]]
    assert [d["busy_ns"] for d in r["devices"]] == [d["busy_ns"] for d in r0["devices"]]
    (note,) = [n for n in r["notes"] if "the export's" in n]
    assert note.startswith(f"{path}: the export's {KERNELS} has no ") and lost in note
    for column in drop:
        assert column in note


@pytest.mark.parametrize("table, column", [(KERNELS, "start"), (KERNELS, "deviceId"), ("NVTX_EVENTS", "eventType")])
def test_nsys_optional_columns_a_missing_required_column_is_named(tmp_path, table, column):
    path = without(tmp_path, NVTX, table, {column})
    with pytest.raises(InputError) as e:
        open_traces([path])
    assert f"the export's {table} table has no {column} column" in str(e.value)
    assert "corrupt" not in str(e.value)
    r = subprocess.run([sys.executable, "-m", "wanscope", "analyze", str(path)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert str(path) in line and f"{table} table has no {column} column" in line
