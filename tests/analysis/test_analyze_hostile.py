"""Hostile inputs to ``wanscope analyze`` (and the ingest every trace command shares):
a fatal problem is one line naming the file, exit code 2, no traceback, no hang, bounded
memory and nothing half-written; a per-record problem is counted under ``warnings``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import duckdb
import pytest
from hostile_cli import EMBEDDED, REPO, assert_one_line_error, gzip_stream, kernel, run_cli, write_lines, write_minified
from shared_fixtures import HANG_S


def analyze_json(path) -> dict:
    r = run_cli("analyze", path, "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout)


# --- options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["--top", "0"], ["--top"]),
        (["--top", "-1"], ["--top"]),
        (["--min-gap-ns", "-1"], ["--min-gap-ns"]),
        (["--min-gap-ns", "abc"], ["--min-gap-ns"]),
        (["--step-range", "a:b"], ["--step-range"]),
        (["--step-range", "::"], ["--step-range"]),
        (["--step-range", "5:2"], ["--step-range", "selects no step"]),
        (["--step-range", "3:3"], ["--step-range", "selects no step"]),
        (["--format", "yaml"], ["--format"]),
        (["--bogus"], ["--bogus"]),
    ],
)
def test_bad_options_are_one_line(args, words):
    assert_one_line_error(run_cli("analyze", EMBEDDED, *args), *words)


# one profiled step, numbered 1 (the embedded trace has no steps)
STEPPED = REPO / "tests" / "data" / "h200_wan21_1p3b_triton_step1.json.gz"


@pytest.mark.parametrize(
    "trace, args",
    [
        (STEPPED, ["--step-range", "-99999999999999999999999:99999999999999999999999"]),
        (STEPPED, ["--step-range", ":99999999999999999999999"]),
        (EMBEDDED, ["--min-gap-ns", "99999999999999999999999"]),
    ],
)
def test_huge_numbers_in_options(trace, args):
    r = run_cli("analyze", trace, *args, "--format", "json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    json.loads(r.stdout)


@pytest.mark.parametrize(
    "trace, step_range, have",
    [
        (STEPPED, "99999999999999999999999:", "the trace's steps are 1"),
        (STEPPED, "2:", "the trace's steps are 1"),
        (STEPPED, ":1", "the trace's steps are 1"),
        (EMBEDDED, "0:", "the trace has no steps"),
    ],
)
def test_a_step_range_that_selects_no_step_says_which_steps_there_are(trace, step_range, have):
    line = assert_one_line_error(run_cli("analyze", trace, "--step-range", step_range))
    assert line == f"wanscope: error: --step-range {step_range} selects no step: {have}" + (
        " (no wanscope/step#k or ProfilerStep#N ranges)" if trace == EMBEDDED else ""
    )


# --- what is not a regular file --------------------------------------------------------


def test_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert_one_line_error(run_cli("analyze", fifo), fifo, "not a regular file")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_devices_are_refused(device):
    assert_one_line_error(run_cli("analyze", device), device, "not a regular file")


def test_symlink_loop_says_so(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    assert_one_line_error(run_cli("analyze", a), a, "symbolic links")


def test_dangling_symlink_is_no_such_file(tmp_path):
    link = tmp_path / "t.json"
    link.symlink_to(tmp_path / "gone.json")
    assert_one_line_error(run_cli("analyze", link), link, "no such file")


@pytest.mark.parametrize("name", ["two\nlines.json", "esc\x1b[31mred.json", "tab\there.json"])
def test_file_names_with_control_characters_stay_on_one_line(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"")
    line = assert_one_line_error(run_cli("analyze", path), "empty file")
    assert "\x1b" not in line and "\t" not in line and repr(name)[1:-1] in line


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs root to run the CLI as another user (root reads mode-000 files)",
)
def test_unreadable_file_as_another_user(tmp_path_factory):
    # As root, chmod 000 stops nothing; run the CLI as nobody against a world-traversable dir.
    import tempfile

    d = tempfile.mkdtemp(prefix="wanscope-hostile-")
    try:
        os.chmod(d, 0o755)
        trace = os.path.join(d, "t.json.gz")
        shutil.copy(EMBEDDED, trace)
        os.chmod(trace, 0)
        r = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-m",
                "wanscope",
                "analyze",
                trace,
            ],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            cwd=d,
        )
        assert_one_line_error(r, trace, "not readable")
    finally:
        shutil.rmtree(d)


# --- databases ----------------------------------------------------------------------------


def test_truncated_wanscope_database(tmp_path, embedded_db):
    cut = tmp_path / "cut.duckdb"
    data = embedded_db.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    assert_one_line_error(run_cli("analyze", cut), cut)
    cut.write_bytes(data[:20])
    assert_one_line_error(run_cli("analyze", cut), cut)


def test_foreign_duckdb_with_our_table_names(tmp_path):
    db = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE kernels (a INTEGER); CREATE TABLE cpu_ops (b VARCHAR)")
    con.close()
    assert_one_line_error(run_cli("analyze", db), db, "wanscope")
    assert_one_line_error(run_cli("stats", db, "--report", "cuda_gpu_kern_sum"), db, "wanscope")


def test_db_never_overwrites_an_input(tmp_path):
    trace = tmp_path / "t.json.gz"
    shutil.copy(EMBEDDED, trace)
    before = trace.read_bytes()
    assert_one_line_error(run_cli("analyze", trace, "--db", trace), trace, "input")
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]


def test_db_never_replaces_a_file_that_is_not_a_database(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    assert_one_line_error(run_cli("analyze", EMBEDDED, "--db", notes), notes, "not a DuckDB database")
    assert notes.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_db_replaces_an_earlier_database(tmp_path, embedded_db):
    db = tmp_path / "keep.duckdb"
    shutil.copy(embedded_db, db)
    r = run_cli("analyze", EMBEDDED, "--db", db, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.duckdb"]


@pytest.mark.parametrize("where", ["missing/dir/x.duckdb", "file/x.duckdb", "/proc/x.duckdb"])
def test_db_where_it_cannot_be_written(tmp_path, where):
    (tmp_path / "file").write_text("a file, not a directory")
    db = tmp_path / where if not where.startswith("/") else where
    assert_one_line_error(run_cli("analyze", EMBEDDED, "--db", db), db)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_db_that_is_a_fifo_is_refused(tmp_path):
    # A FIFO of our own stands for /dev/null: as root, os.replace over /dev/null replaced
    # the system's device with a regular file (never test that on the real one).
    fifo = tmp_path / "null"
    os.mkfifo(fifo)
    assert_one_line_error(run_cli("analyze", EMBEDDED, "--db", fifo), fifo, "not a regular file")
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_db_with_a_database_input_is_an_error(tmp_path, embedded_db):
    out = tmp_path / "copy.duckdb"
    assert_one_line_error(run_cli("analyze", embedded_db, "--db", out), "--db")
    assert not out.exists()


# --- JSON structure -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b'{"traceEvents": {"a": 1}}',
        b'{"traceEvents": "abc"}',
        b'{"traceEvents": null}',
        b'{"traceEvents": 5, "other": [1, 2]}',
        b'{"note": "traceEvents", "traceEvents": 5}',
    ],
)
def test_trace_events_not_a_list(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    assert_one_line_error(run_cli("analyze", path), path, "traceEvents is not a list")


@pytest.mark.parametrize(
    "content",
    [
        b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b', "traceEvents": []}',
        b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}",
        b'{"traceEvents": [' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"]}",
        b'{"traceEvents": [{"ph": "X", "args": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}",  # in args not read
    ],
)
def test_deep_nesting_is_refused_quickly(tmp_path, content):
    path = tmp_path / "deep.json"
    path.write_bytes(content)
    assert_one_line_error(run_cli("analyze", path, memory_gb=3), path, "nested")


@pytest.mark.parametrize("layout", ["lines", "native"])
def test_deep_nesting_in_our_layouts_is_read_quickly(tmp_path, layout):
    """One event per line or torch's layout go to DuckDB, which reads an event nested
    100,000 deep in args it does not read (the streaming parser refuses it: ijson's cost
    grows with the square of the depth). The first event too: its 200 KB line was once too
    long for the layout to be seen (past the first 64 KB read)."""
    deep = (
        b'{"ph": "X", "cat": "cpu_op", "name": "deep", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"x": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}"
    )
    events = [deep, json.dumps(kernel(100, 5)).encode()]
    if layout == "lines":
        content = b'{"traceEvents": [\n' + b",\n".join(events) + b"\n]}\n"
    else:
        blocks = (b"  {\n    " + e[1:-1] + b"\n  }" for e in events)
        content = b'{\n  "traceEvents": [\n' + b",\n".join(blocks) + b"\n  ]\n}\n"
    path = tmp_path / "deep.json"
    path.write_bytes(content)
    r = run_cli("analyze", path, "--format", "json", memory_gb=3)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["sources"][0]["events"] == 2 and doc["devices"][0]["kernel_count"] == 1 and doc["warnings"] == {}


def test_array_top_level(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b'[{"traceEvents": []}]')
    assert_one_line_error(run_cli("analyze", path), path, "not a trace")


# --- gzip ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head, unit, tail, problem",
    [
        (b"", b" ", b"", "no traceEvents"),  # 1 GB of whitespace
        (b"", b"[", b"", "not JSON: expected an object"),  # 1 GB of [[[[
        (b'{"traceEvents": [{"name": "', b"a", b'"}]}', "larger than"),  # one 1 GB string
        (b'{"traceEvents": [', b" ", b"]}", "larger than"),  # 1 GB of blank events
        (b'{"traceEvents": [\n  {\n    "ph": "X"\n  }\n  ], "x": "', b"a", b'"}', "larger than"),  # after the events
        # one event of 1 GB of small values in args not read: ijson built it whole (minutes,
        # then out of memory); minified here, torch's layout and the part after the events below
        (b'{"traceEvents": [{"ph": "X", "args": {"a": [', b"1,", b"1]}}]}", "an event larger than 64 MB"),
    ],
)
def test_gzip_bombs(tmp_path, head, unit, tail, problem):
    bomb = gzip_stream(tmp_path / "bomb.json.gz", head, unit, 1 << 30, tail)
    assert bomb.stat().st_size < 4 << 20
    assert_one_line_error(run_cli("analyze", bomb, memory_gb=3), bomb, problem)


@pytest.mark.parametrize(
    "head, tail, problem",
    [
        (
            b'{\n  "traceEvents": [\n  {\n    "ph": "X", "args": {"a": [',
            b"1]}\n  }\n  ]\n}\n",
            "an event larger than 1 MB",
        ),
        (b'{"traceEvents": [{"ph": "X"}], "x": [', b"1]}", "after traceEvents is larger than 1 MB"),
    ],
)
def test_small_value_bombs_stop_at_the_event_limit(tmp_path, monkeypatch, head, tail, problem):
    """The other layouts of the bomb above, in process with the limit at 1 MB: reading 64 MB of
    small values takes the parser ~20-40 s a case (the subprocess case above shows the real
    limit and the memory bound)."""
    from wanscope.errors import InputError
    from wanscope.trace import kineto
    from wanscope.trace.load import open_traces

    monkeypatch.setattr(kineto, "EVENT_LIMIT", 1 << 20)
    bomb = gzip_stream(tmp_path / "bomb.json.gz", head, b"1,", 16 << 20, tail)
    with pytest.raises(InputError, match=problem):
        open_traces([bomb])


def test_huge_event_in_native_layout(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.write(b'{\n  "traceEvents": [\n  {\n    "ph": "X",\n    "name": "')
        for _ in range(160):
            f.write(b"a" * (1 << 20))
        f.write(b'"\n  }\n  ]\n}\n')
    assert_one_line_error(run_cli("analyze", path, memory_gb=3), path, "larger than")


# --- per-record problems: counted, never fatal --------------------------------------------


def test_records_without_usable_times_are_counted(tmp_path):
    good = kernel(100, 5)
    no_ph = {k: v for k, v in kernel(200, 5).items() if k != "ph"}
    no_dur = {k: v for k, v in kernel(300, 5).items() if k != "dur"}
    bad_dur = kernel(400, "x")
    negative_ts = kernel(-5, 3)
    for layout, write in (("lines", write_lines), ("minified", write_minified)):
        path = write(tmp_path / f"{layout}.json", [good, no_ph, no_dur, bad_dur, negative_ts])
        doc = analyze_json(path)
        assert doc["warnings"] == {"malformed_event": 1, "no_timing": 3}, layout
        assert doc["devices"][0]["kernel_count"] == 1


def test_events_without_a_name_are_counted(tmp_path):
    nameless = [
        {**kernel(200, 5), "name": None},
        {k: v for k, v in kernel(300, 5).items() if k != "name"},
        {"ph": "X", "cat": "python_function", "name": None, "pid": 1, "tid": 1, "ts": 150, "dur": 300},
    ]
    path = write_lines(tmp_path / "t.json", [kernel(100, 5), *nameless])
    doc = analyze_json(path)
    assert doc["warnings"] == {"malformed_event": 3} and doc["devices"][0]["kernel_count"] == 1
    for args in (
        ["analyze", path],
        ["report", path, "--out", tmp_path / "r"],
        ["diff", path, path],
        ["diff", path, path, "--format", "html", "--out", tmp_path / "d.html"],
    ):
        r = run_cli(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])


def test_gpu_records_without_a_device_or_stream_are_counted(tmp_path):
    """device from args.device else pid, stream from args.stream else tid: with neither
    usable (or beyond the INTEGER device column) the GPU record is counted, not kept as
    NULL (the report's timeline sorts streams) nor fatal for the file."""
    memcpy = {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD (Pageable -> Device)",
        "pid": 0,
        "tid": 7,
        "ts": 400,
        "dur": 5,
        "args": {"device": 0, "stream": 7, "bytes": 1024},
    }
    bad = [
        {**kernel(200, 5), "pid": "p", "args": {"device": "x", "stream": 7}},
        {**kernel(300, 5), "tid": [], "args": {"device": 0, "stream": {}}},
        {**memcpy, "ts": 500, "pid": "p", "args": {"device": 2**40, "stream": 7, "bytes": 1}},
        {**kernel(600, 5), "args": {"device": 0, "stream": 7, "registers per thread": 2**40}},  # kept, regs dropped
        {**memcpy, "ts": 700, "args": {"device": 0, "stream": 7, "bytes": "many"}},  # kept, size unknown
    ]
    path = write_lines(tmp_path / "t.json", [kernel(100, 5), memcpy, *bad])
    doc = analyze_json(path)
    assert doc["warnings"] == {"malformed_event": 3}
    (d,) = doc["devices"]
    assert (d["kernel_count"], d["memop_count"]) == (2, 2)
    for args in (
        ["report", path, "--out", tmp_path / "r"],
        ["stats", path, "--report", "cuda_gpu_mem_size_sum"],
        ["stats", path, "--report", "cuda_gpu_mem_time_sum"],
        ["diff", path, path],
    ):
        r = run_cli(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])


def test_end_beyond_64_bits_is_counted(tmp_path):
    """ts and dur each fit in 64 bits of ns, their sum does not: one record, not the file."""
    huge = [
        kernel(9223372036854775, 1_000_000),
        kernel(1, 9223372036854775),
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 9223372036854775, "dur": 9223372036854775},
    ]
    for layout, write in (("lines", write_lines), ("minified", write_minified)):
        doc = analyze_json(write(tmp_path / f"{layout}.json", [kernel(100, 5), *huge]))
        assert doc["warnings"] == {"integer_overflow": 3}, layout
        assert doc["devices"][0]["kernel_count"] == 1


@pytest.mark.parametrize(
    "meta, rank",
    [
        ({"distributedInfo": {"rank": 2**40}}, 0),  # beyond the INTEGER rank column
        ({"distributedInfo": {"rank": -1_000_000}}, 0),  # negative (and a staging placeholder)
        ({"distributedInfo": {"rank": True}}, 0),  # a bool is no rank
        ({"distributedInfo": {"rank": 3}}, 3),
        ({"deviceProperties": [{"id": 2**40, "name": "x", "numSms": 2**40, "totalGlobalMem": 10**30}]}, 0),
        ({"deviceProperties": [{"id": "zero", "name": {"a": 1}, "computeMajor": [9], "numSms": "many"}]}, 0),
        ({"deviceProperties": [None, 5, {"id": 0, "name": "H200", "computeMajor": 9, "computeMinor": 0}]}, 0),
    ],
)
@pytest.mark.parametrize("where", ["before", "after"])
def test_hostile_trace_metadata(tmp_path, meta, rank, where):
    """Top-level keys before or after traceEvents (the header and the trailer)."""
    events = '"traceEvents": [\n' + json.dumps(kernel(100, 5)) + "\n]"
    keys = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items())
    path = tmp_path / "t.json"
    path.write_text("{" + (f"{keys}, {events}" if where == "before" else f"{events}, {keys}") + "}\n")
    doc = analyze_json(path)
    assert [(d["rank"], d["kernel_count"]) for d in doc["devices"]] == [(rank, 1)]


def test_invalid_utf8_in_a_name_is_counted_and_excluded_in_every_layout(tmp_path):
    bad = json.dumps(kernel(200, 5, name="k@@")).encode().replace(b"@@", b"\xff\xfe")
    lines = write_lines(tmp_path / "lines.json", [kernel(100, 5)], raw_lines=[bad])
    minified = write_minified(tmp_path / "min.json", [kernel(100, 5)], raw_events=[bad])
    a, b = analyze_json(lines), analyze_json(minified)
    for doc in (a, b):
        assert doc["warnings"] == {"undecodable_bytes": 1}
        (d,) = doc["devices"]
        assert ([k["name"] for k in d["top_kernels"]], d["kernel_count"], d["window_ns"]) == (["k"], 1, 5_000)


# --- Ctrl-C -------------------------------------------------------------------------------


def test_ctrl_c_as_the_interpreter_exits_prints_no_traceback():
    """A SIGINT after the command has finished, during the interpreter's exit (atexit
    callbacks such as the removal of DuckDB's spill folder, thread joins), printed
    "Exception ignored in atexit callback" and a traceback after a complete run."""
    code = (
        "import atexit, os, signal, time; from wanscope.cli import main; "
        "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2))); main()"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "analyze", EMBEDDED, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["devices"]


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory):
    """About 60 MB, one event per line: ingest takes a few seconds."""
    path = tmp_path_factory.mktemp("big") / "big.json"
    line = json.dumps(kernel(0, 1)).encode()
    head, tail = line.split(b'"ts": 0')
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [\n')
        f.write(b",\n".join(head + b'"ts": %d' % (10 + 2 * i) + tail for i in range(400_000)))
        f.write(b"\n]}\n")
    return path


def interrupt_when(proc, ready, deadline=HANG_S, settle=0.3, signum=signal.SIGINT):
    """Send ``signum`` once ``ready()`` is true (the run is past its start), then wait."""
    t = time.monotonic()
    while not ready() and proc.poll() is None and time.monotonic() - t < deadline:
        time.sleep(0.02)
    time.sleep(settle)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=HANG_S)
    return proc.returncode, err


@pytest.mark.parametrize("settle", [0.0, 0.4, 1.0])
def test_ctrl_c_during_ingest_leaves_no_db(tmp_path, big_trace, settle):
    db = tmp_path / "keep.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wanscope", "analyze", big_trace, "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    code, err = interrupt_when(proc, lambda: any(tmp_path.iterdir()), settle=settle)
    if code == 0:
        pytest.skip("the run finished before the interrupt")
    assert code == 130 and "Traceback" not in err, err
    assert err.splitlines() == ["wanscope: interrupted"], err  # one line: not click's blank line + Abort
    assert list(tmp_path.iterdir()) in ([], [db])  # no temporary file; the db only if complete
    if db.exists():
        assert run_cli("query", db, "SELECT count(*) FROM kernels", "--format", "csv").returncode == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_termination_during_ingest_leaves_no_db(tmp_path, big_trace, signum):
    """SIGTERM (a service manager, ``timeout``) and SIGHUP (a closed terminal) clean up like
    Ctrl-C: no temporary database, chunk or spill files; exit 128 + the signal, one line."""
    db, tmp = tmp_path / "keep.duckdb", tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "wanscope", "analyze", big_trace, "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    code, err = interrupt_when(proc, lambda: any(tmp.iterdir()), settle=0.2, signum=signum)
    if code == 0:
        pytest.skip("the run finished before the signal")
    assert code == 128 + signum, err
    assert err.strip().splitlines() == [f"wanscope: terminated ({signal.Signals(signum).name})"], err
    assert sorted(p.name for p in tmp_path.iterdir()) in (["tmp"], ["keep.duckdb", "tmp"])
    assert list(tmp.iterdir()) == []  # chunk files and DuckDB's spill folder removed


def test_db_refuses_another_programs_duckdb_file(tmp_path, big_trace):
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE notes AS SELECT 42 AS answer")
    con.close()
    before = other.read_bytes()
    r = run_cli("analyze", big_trace, "--db", other)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        (
            f"wanscope: error: {other}: is a DuckDB database without wanscope's tables; not replacing it "
            "(--db keeps the ingested database)"
        )
    ], r.stderr
    assert other.read_bytes() == before


def test_empty_rank_file_in_a_directory_is_an_error(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank-0.json").write_text('{"traceEvents": [' + json.dumps(kernel(10, 5)) + "]}")
    (ranks / "rank-1.json").write_text("")
    r = run_cli("analyze", ranks)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"wanscope: error: {ranks / 'rank-1.json'}: empty file"
    ], r.stderr
