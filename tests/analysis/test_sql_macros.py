"""The SQL macros of ``analysis/stdlib.sql``: inline rows into the canonical tables, the exact
rows out; their documented columns are the ones they return; ``query``, ``schema`` and the
Python API reach them.

The rows (times in ns, rank 0, host process 1 thread 1; docs/sql.md has the definitions):
  steps: 1 on CPU 0..50, 2 on 60..90, 3 on 95..99 (launches nothing).
  launches (cudaLaunchKernel): correlation 1 at 10, 2 at 20 (step 1), 3 at 70 (step 2), 4 at 55
  (between steps), 5 at 30 (step 1, a memcpy), 6 at 80 (step 2, a memset).
  device 0: gemm kernel (corr 1) 100..200 on stream 7; NCCL kernel (corr 2) 150..300 on stream 8,
  overlapping it; memcpy HtoD (corr 5) 300..350 on stream 9, touching it; kernel of no category
  (corr 3) 400..450; a 0 ns memset (corr 6) at 500; kernel (corr 4) 600..610.
  device 1: kernel (corr 4 of rank 1's own process 2) 120..130.
"""

from __future__ import annotations

import json

import duckdb
import pytest
from cli_context import run_main
from shared_fixtures import REPO
from synthetic_traces import BASE_EVENTS, write_trace

import wanscope
from wanscope.analysis.categories import categorize
from wanscope.analysis.stdlib import create_macros, macro_rows
from wanscope.trace.load import schema_sql

GEMM = "ampere_sgemm_128x64_nn"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
PLAIN = "my_kernel"
KERNELS = [  # rank, device, stream, start, end, name, correlation, pid
    (0, 0, 7, 100, 200, GEMM, 1, 1),
    (0, 0, 8, 150, 300, NCCL, 2, 1),
    (0, 0, 7, 400, 450, PLAIN, 3, 1),
    (0, 0, 7, 600, 610, PLAIN, 4, 1),
    (1, 1, 7, 120, 130, PLAIN, 4, 2),
]
MEMOPS = [  # kind, copy_kind, rank, device, stream, start, end, name, correlation, pid
    ("memcpy", "HtoD", 0, 0, 9, 300, 350, "Memcpy HtoD (Pageable -> Device)", 5, 1),
    ("memset", None, 0, 0, 7, 500, 500, "Memset (Device)", 6, 1),
]
LAUNCHES = [(10, 1), (20, 2), (70, 3), (55, 4), (30, 5), (80, 6)]  # host start, correlation
STEPS = [(1, 0, 50), (2, 60, 90), (3, 95, 99)]

# gpu_activity()'s rows of rank 0 device 0 by start, as (start_ns, end_ns, kind, category, correlation)
ACTIVITY = [
    (100, 200, "kernel", "gemm", 1),
    (150, 300, "kernel", "communication", 2),
    (300, 350, "memcpy", "memcpy_HtoD", 5),
    (400, 450, "kernel", "other", 3),
    (500, 500, "memset", "memset", 6),
    (600, 610, "kernel", "other", 4),
]


def database(kernels=KERNELS, memops=MEMOPS, launches=LAUNCHES, steps=STEPS) -> duckdb.DuckDBPyConnection:
    """An in-memory database with the canonical schema, the rows given, and the macros."""
    con = duckdb.connect()
    con.execute(schema_sql())
    for r, d, s, a, b, name, corr, pid in kernels:
        con.execute(
            "INSERT INTO kernels (rank, device, stream, start_ns, end_ns, dur_ns, name, correlation, pid) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [r, d, s, a, b, b - a, name, corr, pid],
        )
    for kind, copy_kind, r, d, s, a, b, name, corr, pid in memops:
        con.execute(
            "INSERT INTO memops (kind, copy_kind, bytes, name, rank, device, stream, start_ns, end_ns, dur_ns, "
            "correlation, pid) VALUES (?, ?, 1024, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [kind, copy_kind, name, r, d, s, a, b, b - a, corr, pid],
        )
    for start, corr in launches:
        con.execute(
            "INSERT INTO api_calls VALUES ('runtime', 'cudaLaunchKernel', 'cudaLaunchKernel', 0, 1, 1, ?, ?, 2, ?)",
            [start, start + 2, corr],
        )
    for n, start, end in steps:
        con.execute("INSERT INTO steps VALUES (0, ?, ?, 1, 1, ?, ?)", [n, f"ProfilerStep#{n}", start, end])
    create_macros(con)
    return con


@pytest.fixture
def con():
    c = database()
    yield c
    c.close()


def rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def test_gpu_activity_is_kernels_memcpys_and_memsets_with_their_categories(con):
    got = rows(
        con,
        "SELECT start_ns, end_ns, kind, category, correlation FROM gpu_activity() "
        "WHERE rank = 0 AND device = 0 ORDER BY start_ns",
    )
    assert got == ACTIVITY
    other = (
        "SELECT rank, device, stream, start_ns, end_ns, dur_ns, name, kind, pid FROM gpu_activity() WHERE device = 1"
    )
    assert rows(con, other) == [(1, 1, 7, 120, 130, 10, PLAIN, "kernel", 2)]


def test_a_memcpy_without_a_copy_kind_and_kernel_category_agree_with_python():
    con = database(memops=[("memcpy", None, 0, 0, 9, 300, 350, "Memcpy", 5, 1)])
    assert rows(con, "SELECT category FROM gpu_activity() WHERE kind = 'memcpy'") == [("memcpy_unknown",)]
    for name in (GEMM, NCCL, PLAIN, "triton_poi_fused_add_mul_0", "flash_fwd_kernel"):
        assert rows(con, f"SELECT kernel_category('{name}')") == [(categorize(name),)]


def test_gpu_activity_of_steps_is_what_their_cpu_ranges_launched(con):
    def corrs(args: str) -> list[int]:
        return [c for (c,) in rows(con, f"SELECT correlation FROM gpu_activity({args}) ORDER BY start_ns")]

    assert corrs("") == [1, 4, 2, 5, 3, 6, 4]  # device 1's kernel (120) among them
    assert corrs("step_from := 2") == [3, 6]
    assert corrs("step_to := 2") == [1, 2, 5]
    assert corrs("1, 2") == [1, 2, 5]
    # step_from 0: every step; corr 4 was launched between steps (and rank 1 has none)
    assert corrs("step_from := 0") == [1, 2, 5, 3, 6]
    assert corrs("step_from := 3") == []


def test_step_gpu_is_each_steps_cpu_range_and_the_gpu_interval_of_its_launches(con):
    every = [
        (0, 1, 1, 1, 0, 50, 100, 350, 3),
        (0, 2, 1, 1, 60, 90, 400, 500, 2),
        (0, 3, 1, 1, 95, 99, None, None, 0),
    ]
    assert rows(con, "FROM step_gpu() ORDER BY step") == every
    assert rows(con, "FROM step_gpu(step_from := 2) ORDER BY step") == every[1:]
    assert rows(con, "FROM step_gpu(2, 3)") == every[1:2]


def test_busy_islands_merge_overlapping_and_touching_activity_across_streams(con):
    assert rows(con, "FROM busy_islands() ORDER BY rank, device, island") == [
        (0, 0, 1, 100, 350, 250, 3),  # gemm, NCCL on another stream, the touching memcpy
        (0, 0, 2, 400, 450, 50, 1),
        (0, 0, 3, 500, 500, 0, 1),  # a 0 ns memset is activity
        (0, 0, 4, 600, 610, 10, 1),
        (1, 1, 1, 120, 130, 10, 1),
    ]
    assert rows(con, "FROM busy_islands(step_from := 2) ORDER BY island") == [
        (0, 0, 1, 400, 450, 50, 1),
        (0, 0, 2, 500, 500, 0, 1),
    ]


def test_idle_gaps_are_the_holes_between_islands(con):
    assert rows(con, "FROM idle_gaps() ORDER BY rank, device, start_ns") == [
        (0, 0, 350, 400, 50, 2),
        (0, 0, 450, 500, 50, 3),
        (0, 0, 500, 600, 100, 4),
    ]
    assert rows(con, "FROM idle_gaps(step_to := 2)") == []  # step 1's activity is one island


def test_gpu_windows_whole_trace_and_union_of_step_intervals(con):
    assert rows(con, "FROM gpu_windows() ORDER BY rank, device") == [(0, 0, 100, 610, 510), (1, 1, 120, 130, 10)]
    # steps 1 and 2: 100..350 and 400..500, so the window leaves out 350..400
    assert rows(con, "FROM gpu_windows(1, 3)") == [(0, 0, 100, 500, 350)]
    assert rows(con, "FROM gpu_windows(step_from := 2)") == [(0, 0, 400, 500, 100)]


def test_gpu_windows_of_overlapping_step_intervals_count_their_overlap_once():
    # step 2's kernel (launched at 70) runs 250..450, inside step 1's GPU interval 100..350 at first
    con = database(kernels=[(0, 0, 7, 100, 350, GEMM, 1, 1), (0, 0, 8, 250, 450, GEMM, 3, 1)], memops=[])
    assert rows(con, "SELECT step, gpu_start_ns, gpu_end_ns FROM step_gpu() WHERE gpu_ops > 0 ORDER BY step") == [
        (1, 100, 350),
        (2, 250, 450),
    ]
    assert rows(con, "FROM gpu_windows(step_from := 1)") == [(0, 0, 100, 450, 350)]


def test_overlaps_steps_takes_host_intervals_touching_a_selected_step(con):
    def hits(start: int, end: int, bounds: str, pid: int = 1) -> bool:
        return rows(con, f"SELECT overlaps_steps(0, {pid}, {start}, {end}, {bounds})")[0][0]

    assert hits(50, 55, "1, 2") and hits(55, 60, "2, NULL") and hits(40, 70, "NULL, 2")
    assert not hits(51, 59, "0, NULL")  # between steps 1 and 2
    assert not hits(10, 20, "2, NULL") and not hits(10, 20, "0, NULL", pid=2)
    assert hits(51, 59, "NULL, NULL")  # no bounds: the whole trace


def test_documented_columns_are_the_columns_each_macro_returns(con):
    documented: dict[str, list[tuple[str, str]]] = {}
    for macro, column, type_, _unit, _description in macro_rows():
        documented.setdefault(macro, []).append((column, type_))
    assert sorted(documented) == [
        "busy_islands(step_from, step_to)",
        "gpu_activity(step_from, step_to)",
        "gpu_windows(step_from, step_to)",
        "idle_gaps(step_from, step_to)",
        "step_gpu(step_from, step_to)",
    ]
    for macro, columns in documented.items():
        call = macro.split("(")[0] + "()"
        assert [(name, type_) for name, type_, *_ in rows(con, f"DESCRIBE FROM {call}")] == columns, macro


def test_docs_list_every_macro_and_column():
    text = (REPO / "docs" / "sql.md").read_text()
    for macro, column, _type, unit, _description in macro_rows():
        section = text.split(f"### `{macro}`", 1)
        assert len(section) == 2, f"docs/sql.md has no section ### `{macro}`"
        assert f"| `{column}` | {unit} |" in section[1].split("\n### ", 1)[0], (macro, column)
    for name in ("kernel_category(name)", "overlaps_steps(rank, pid, start_ns, end_ns, step_from, step_to)"):
        assert f"### `{name}`" in text


# --- where the macros are reached ---------------------------------------------------------
# synthetic_traces' BASE: islands 1020..1080 and 1090..1100 us (step 1), 1220..1295 (step 2)


def test_query_calls_the_macros_on_a_trace_and_on_a_kept_database(tmp_path):
    trace = write_trace(tmp_path / "base.json", BASE_EVENTS)
    sql = "SELECT count(*) AS islands, sum(dur_ns) AS busy_ns FROM busy_islands()"
    r = run_main("query", trace, sql, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"islands": 3, "busy_ns": 145_000}]
    db = tmp_path / "base.duckdb"
    assert run_main("analyze", trace, "--db", db, "--format", "json").returncode == 0
    r = run_main("query", db, "SELECT step, gpu_start_ns, gpu_end_ns FROM step_gpu(step_from := 2)", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["step,gpu_start_ns,gpu_end_ns", "2,1220000,1295000"]
    # TEMP macros: the kept database holds none, so any version's macros apply to it
    with duckdb.connect(str(db), read_only=True) as raw:
        assert raw.execute(
            "SELECT count(*) FROM duckdb_functions() WHERE function_name = 'gpu_activity'"
        ).fetchone() == (0,)


def test_query_sandbox_leaves_the_macros_callable(tmp_path):
    trace = write_trace(tmp_path / "base.json", BASE_EVENTS)
    r = run_main("query", trace, "SELECT * FROM gpu_activity() LIMIT 5", "--format", "json")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert len(first) == 5 and {"kind", "category", "dur_ns"} <= set(first[0])
    r = run_main("query", trace, "SET lock_configuration = false")  # the sandbox is on all the same
    assert r.returncode == 2 and "SQL error" in r.stderr


def test_the_python_api_calls_the_macros(tmp_path):
    trace = write_trace(tmp_path / "base.json", BASE_EVENTS)
    with wanscope.open(trace) as t:
        assert t.sql("FROM gpu_windows()").fetchall() == [(0, 0, 1_020_000, 1_295_000, 275_000)]
        windows = t.sql("FROM gpu_windows(step_from := 1)").fetchall()  # two steps, 80 + 75 us
        assert windows == [(0, 0, 1_020_000, 1_295_000, 155_000)]
        device = t.analyze()["devices"][0]
        busy = t.sql("SELECT sum(dur_ns) FROM busy_islands()").fetchall()[0][0]
        assert busy == device["busy_ns"] == 145_000


def test_schema_lists_the_macros_columns_with_units():
    r = run_main("schema", "--format", "json")
    units = {(row["table"], row["column"]): row["unit"] for row in json.loads(r.stdout)}
    assert units[("busy_islands(step_from, step_to)", "dur_ns")] == "ns"
    assert units[("step_gpu(step_from, step_to)", "gpu_ops")] == "count"
    assert units[("kernels", "start_ns")] == "ns"
