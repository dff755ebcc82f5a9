"""Hostile SQL and hostile values for ``wanscope query`` (and ``schema``): the SQL runs on
the trace's tables only (no files, network, extensions or settings), every DuckDB value
type prints in every format, and a huge result streams instead of exhausting memory."""

from __future__ import annotations

import json

import pytest
from hostile_cli import EMBEDDED, assert_one_line_error, run_cli
from shared_fixtures import HANG_S


def query(db, sql, *args, **kwargs):
    return run_cli("query", db, sql, *args, **kwargs)


# --- sandbox ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_sql",
    [
        lambda t: f"COPY (SELECT 1) TO '{t}/copied.csv'",
        lambda t: f"EXPORT DATABASE '{t}/exported'",
        lambda t: f"ATTACH '{t}/attached.duckdb' AS x",
        lambda t: "SELECT * FROM read_csv('/etc/passwd')",
        lambda t: "SELECT * FROM read_text('/etc/hostname')",
        lambda t: "SELECT * FROM glob('/etc/*')",
        lambda t: "INSTALL httpfs",
        lambda t: "LOAD httpfs",
        lambda t: "SET enable_external_access = true",
        lambda t: "SET memory_limit = '100GB'",
        lambda t: "RESET lock_configuration",
        lambda t: f"SELECT 1; COPY (SELECT 1) TO '{t}/second.csv'",
    ],
)
@pytest.mark.parametrize("source", ["trace", "db"])
def test_sql_cannot_reach_outside_the_trace(tmp_path, embedded_db, make_sql, source):
    target = tmp_path / "out"
    target.mkdir()
    r = query(EMBEDDED if source == "trace" else embedded_db, make_sql(target))
    assert_one_line_error(r, "SQL error")
    assert list(target.iterdir()) == []


def test_sql_may_still_change_its_own_copy(embedded_db):
    """The tables are the SQL's to play with; a database kept with --db is opened read-only."""
    r = query(EMBEDDED, "DROP TABLE kernels; SELECT count(*) AS n FROM memops", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"n": 301}], r.stderr
    assert_one_line_error(query(embedded_db, "DROP TABLE kernels"), "SQL error", "read-only")
    assert json.loads(query(embedded_db, "SELECT count(*) AS n FROM kernels", "--format", "json").stdout) == [
        {"n": 1896}
    ]


@pytest.mark.parametrize("sql", ["", "   ", "\n", "-- only a comment", ";"])
def test_empty_sql(embedded_db, sql):
    assert_one_line_error(run_cli("query", embedded_db, "--", sql), "SQL")


# --- values -------------------------------------------------------------------------------

VALUES_SQL = """
SELECT 1.5::DECIMAL(10, 2) AS dec, 'x\\x00y'::BLOB AS blob, INTERVAL 1 DAY AS iv,
       170141183460469231731687303715884105727::HUGEINT AS huge, 18446744073709551615::UBIGINT AS ubig,
       'nan'::DOUBLE AS nan, 'inf'::DOUBLE AS inf, [1, 2] AS list, {'a': 1} AS struct,
       MAP([1], ['x']) AS map, '2024-01-01'::DATE AS d, '12:00'::TIME AS t, now() AS ts,
       uuid() AS u, '101'::BIT AS bits, union_value(k := 1) AS un, NULL AS nothing, 'é\\ud7ff' AS text
"""


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_every_value_type_prints(embedded_db, fmt):
    r = query(embedded_db, VALUES_SQL, "--format", fmt)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    if fmt == "json":
        (row,) = json.loads(r.stdout)
        assert row["dec"] == 1.5 and row["huge"] == 2**127 - 1 and row["ubig"] == 2**64 - 1
        assert row["nan"] is None and row["list"] == [1, 2] and row["nothing"] is None


def test_duplicate_column_names_are_kept_in_json(embedded_db):
    r = query(embedded_db, "SELECT 1 AS a, 2 AS a, 3 AS a_1", "--format", "json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert sorted(row.values()) == [1, 2, 3] and row["a"] == 1


def test_json_and_csv_layout(embedded_db):
    """Streaming keeps the layout: a JSON list of row objects, two-space indent; an empty
    result is []."""
    r = query(embedded_db, "SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, NULL ORDER BY a", "--format", "json")
    assert r.stdout == '[\n  {\n    "a": 1,\n    "b": "x"\n  },\n  {\n    "a": 2,\n    "b": null\n  }\n]\n'
    assert query(embedded_db, "SELECT 1 AS a WHERE false", "--format", "json").stdout == "[]\n"
    assert query(embedded_db, "SELECT 1 AS a, 'x,y' AS b", "--format", "csv").stdout == 'a,b\n1,"x,y"\n'


# --- size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_large_result_streams_in_bounded_memory(embedded_db, fmt):
    # 8 million rows: about 1 GB as Python tuples (a MemoryError under this limit) when
    # fetched whole; streamed, the process stays small.
    r = query(
        embedded_db,
        "SELECT range AS i, range * 2 AS j FROM range(8000000)",
        "--format",
        fmt,
        memory_gb=1.2,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("\n") >= 8_000_000


def test_table_refuses_a_result_too_large_to_draw(embedded_db):
    assert_one_line_error(query(embedded_db, "SELECT * FROM range(100000000000)"), "--format csv")


# --- schema -------------------------------------------------------------------------------


def test_schema_takes_no_arguments():
    assert_one_line_error(run_cli("schema", "extra"), "extra")


@pytest.mark.parametrize(
    "command",
    [
        "schema --format csv",
        "query {db} 'SELECT * FROM range(2000000)' --format csv",
        "query {db} 'SELECT * FROM range(2000000)' --format json",
    ],
)
def test_output_to_a_closed_pipe(embedded_db, command):
    """`wanscope ... | head -c 10`: the reader goes away; no traceback, no error line."""
    import subprocess
    import sys

    p = subprocess.run(
        f"{sys.executable} -m wanscope {command.format(db=embedded_db)} | head -c 10 > /dev/null",
        shell=True,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.stderr == "", p.stderr[-2000:]
