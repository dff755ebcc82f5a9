"""Bad input: fatal problems are one line naming the file, exit code 2, no traceback;
per-record problems are counted by kind under ``warnings`` and excluded."""

import gzip
import json

import pytest
from cli_context import run_main as run_cli

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


def kernel(ts, dur, corr, name="k", **extra):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr, **extra},
    }


def launch(ts, corr):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 1,
        "args": {"correlation": corr},
    }


def write_native(path, events):
    """Write events in torch.profiler's own layout (one block of lines per event)."""
    blocks = []
    for e in events:
        inner = ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items())
        blocks.append("  {\n    " + inner + "\n  }")
    path.write_text('{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + ",\n".join(blocks) + "\n  ]\n}\n")


def test_per_record_problems_are_counted_and_excluded(tmp_path):
    events = [
        launch(5, 1),
        kernel(10, 5, 1),  # valid: 10..15
        launch(15, 2),
        kernel(20, 10, 2),  # 20..30, its name made undecodable below
        kernel(0, 4, 3),  # ts = 0: no timing
        kernel(40, 0, 4),  # zero duration
        kernel(50, -3, 5),  # ends before it starts
        {"ph": "f", "id": 77, "pid": 0, "tid": 7, "ts": 10, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "X", "cat": "mystery_category", "name": "x", "pid": 1, "tid": 1, "ts": 12, "dur": 1},
        kernel(60, 1, 18446744073709551617123),  # correlation beyond 64 bits
    ]
    path = tmp_path / "t.json"
    write_native(path, events)
    raw = path.read_bytes().replace(
        b'"name": "k", "pid": 0, "tid": 7, "ts": 20', b'"name": "k\xff\xfe", "pid": 0, "tid": 7, "ts": 20'
    )
    raw = raw.replace(
        b'"name": "k",\n    "pid": 0,\n    "tid": 7,\n    "ts": 20',
        b'"name": "k\xff\xfe",\n    "pid": 0,\n    "tid": 7,\n    "ts": 20',
    )
    path.write_bytes(raw)
    result = analyze(open_traces([path]))
    assert result["warnings"] == {
        "no_timing": 1,
        "zero_duration": 1,
        "end_before_start": 1,
        "unpaired_flow": 1,
        "unknown_category": 1,
        "integer_overflow": 1,
        "undecodable_bytes": 1,
        # the launch of the kernel excluded for its undecodable name has no kernel record left
        "launch_without_kernel": 1,
    }
    (d,) = result["devices"]
    # Every counted record is excluded from window and busy (issue 2), the kernel with
    # undecodable bytes in its name (20..30) and the one whose correlation overflows (60..61)
    # too, except the zero-duration kernel, which is still a kernel: 10..15 and 40..40 remain.
    assert (d["window_ns"], d["busy_ns"], d["kernel_count"]) == (30_000, 5_000, 2)
    assert [k["name"] for k in d["top_kernels"]] == ["k"]


def test_native_and_minified_layouts_agree(tmp_path):
    events = [launch(1.0005, 1), kernel(2.0004, 1.0006, 1), launch(3, 2), kernel(4.1234567, 2.5, 2)]
    native, minified, lines = tmp_path / "n.json", tmp_path / "m.json", tmp_path / "l.json"
    write_native(native, events)
    minified.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    lines.write_text('{"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + "\n]}\n")
    a, b, c = (analyze(open_traces([p])) for p in (native, minified, lines))
    # start_ns = round(ts * 1000) on the decimal text: 2000.4 -> 2000, 4123.4567 -> 4123
    assert a["devices"][0]["window_start_ns"] == 2000
    assert a["devices"][0]["window_end_ns"] == 4123 + 2500
    for r in (a, b, c):
        r.pop("sources")
    assert a == b == c


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "empty file"),
        (b"hello world", "not a trace"),
        (b'{"schemaVersion": 1, "other": []}', "no traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1,', "truncated"),
        (b'{"traceEvents": [{"ph": "X" "cat"}]}', "malformed JSON"),
    ],
)
def test_fatal_problems_are_one_line(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    r = run_cli("analyze", path)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert str(path) in lines[0] and problem in lines[0]


def test_truncated_gzip(tmp_path):
    path = tmp_path / "cut.json.gz"
    full = gzip.compress(json.dumps({"traceEvents": [kernel(10, 5, 1)] * 2000}).encode())
    path.write_bytes(full[: len(full) // 2])
    r = run_cli("analyze", path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "gzip" in r.stderr and str(path) in r.stderr


def test_missing_file_and_unreadable_directory(tmp_path):
    r = run_cli("analyze", tmp_path / "nope.json")
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run_cli("analyze", tmp_path)
    assert r.returncode == 2 and "no trace files" in r.stderr


def test_db_file_not_left_half_written(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [')
    db = tmp_path / "keep.duckdb"
    r = run_cli("analyze", bad, "--db", db)
    assert r.returncode == 2
    assert list(tmp_path.iterdir()) == [bad]
