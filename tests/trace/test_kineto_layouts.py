"""The Kineto ingest's two paths (the events region cut into JSON arrays for DuckDB, and
the streaming parser it falls back to) on layouts and defects aimed at the cutting: the
same events give the same analysis in every layout, a file that is not valid JSON is one
error, and nothing of a failed fast pass is left behind."""

from __future__ import annotations

import json
import threading

import pytest
import synthetic_traces

from wanscope.analysis.summary import analyze
from wanscope.errors import InputError
from wanscope.trace import kineto, open_traces


def kernel(ts, dur, corr, name="k"):
    return synthetic_traces.kernel(name, ts, dur, corr)


def launch(ts, corr):
    return synthetic_traces.launch(ts, corr, dur=1)


EVENTS = [
    launch(5, 1),
    kernel(10, 5, 1),
    launch(15, 2),
    kernel(20, 10, 2),
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": 4,
        "dur": 30,
        "args": {"External id": 1},
    },
]


def block(e) -> str:
    """One event in torch.profiler's layout: ``  {``, inner lines at four spaces, ``  }``."""
    return "  {\n    " + ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()) + "\n  }"


def line(e) -> str:
    return json.dumps(e)


def mini(e) -> str:
    return json.dumps(e, separators=(",", ":"))


def three_layouts(events, native_tail: str = "") -> tuple[tuple[str, str], ...]:
    """(name, file text) of ``events`` in torch.profiler's block layout (``native_tail``
    after its ``]``), one event per line, and minified."""
    return (
        ("native", '{\n  "traceEvents": [\n' + ",\n".join(map(block, events)) + "\n  ]" + native_tail + "\n}\n"),
        ("lines", '{"traceEvents": [\n' + ",\n".join(map(line, events)) + "\n]}\n"),
        ("min", '{"traceEvents":[' + ",".join(map(mini, events)) + "]}"),
    )


def result(path) -> dict:
    out = analyze(open_traces([path]))
    out.pop("sources")
    return out


@pytest.fixture
def reference(tmp_path):
    """The analysis of EVENTS, minified (the streaming parser), with its real values."""
    path = tmp_path / "ref.json"
    path.write_text('{"traceEvents":[' + ",".join(map(mini, EVENTS)) + "]}")
    ref = result(path)
    (d,) = ref["devices"]
    assert (d["kernel_count"], d["window_start_ns"], d["window_end_ns"], d["busy_ns"]) == (2, 10_000, 30_000, 15_000)
    assert ref["warnings"] == {}
    return ref


E = EVENTS


@pytest.mark.parametrize(
    "text",
    [
        # one event per line, "]}" on the last event's line (no "\n]" after the events)
        '{"traceEvents": [\n' + ",\n".join(map(line, E)) + "]}\n",
        '{"traceEvents": [\n' + ",\n".join("  " + line(e) for e in E) + "]}\n",
        # the closing "]" at another indentation than the events
        '{"traceEvents": [\n' + ",\n".join("  " + line(e) for e in E) + "\n]}\n",
        '{"traceEvents": [\n' + ",\n".join(map(line, E)) + "\n  ]}\n",
        '{"traceEvents": [\n' + ",\n".join("\t" + line(e) for e in E) + "\n]}\n",
        # torch's layout, then one per line, then minified up to the end
        '{\n  "traceEvents": [\n'
        + ",\n".join(map(block, E[:2]))
        + ",\n  "
        + line(E[2])
        + ",\n  "
        + ",".join(map(mini, E[3:]))
        + "]}",
        # one per line then torch's layout at no indentation, and the reverse
        '{"traceEvents": [\n'
        + ",\n".join(map(line, E[:2]))
        + ",\n"
        + ",\n".join(block(e).replace("\n  ", "\n") for e in E[2:])
        + "\n]}\n",
        '{\n  "traceEvents": [\n'
        + ",\n".join(map(block, E[:2]))
        + ",\n"
        + ",\n".join("  " + line(e) for e in E[2:])
        + "\n  ]\n}\n",
        # tabs for the indentation of torch's layout
        '{\n\t"traceEvents": [\n'
        + ",\n".join(block(e).replace("    ", "\t\t").replace("  ", "\t") for e in E)
        + "\n\t]\n}\n",
        # a line that looks like an event start inside an event (at the events' indentation)
        '{"traceEvents": [\n' + ",\n".join(map(line, E[:-1])) + ',\n{"ph": "X", "cat": "cpu_op", "name": "aten::mm",'
        ' "pid": 1, "tid": 1, "ts": 4, "dur": 30, "args": {"External id": 1, "l": [\n{"a": 1}\n]}}\n]}\n',
        # "\n  ]" inside the last event of torch's layout
        '{\n  "traceEvents": [\n'
        + ",\n".join(map(block, E[:-1]))
        + ',\n  {\n    "ph": "X", "cat": "cpu_op", "name": "aten::mm",'
        ' "pid": 1, "tid": 1, "ts": 4, "dur": 30,\n    "args": {"External id": 1, "l": [\n  ]}\n  }\n  ]\n}\n',
    ],
)
def test_layouts_give_the_same_analysis(tmp_path, reference, text):
    path = tmp_path / "t.json"
    path.write_text(text)
    json.loads(text)  # each is valid JSON
    assert result(path) == reference


def test_a_minified_tail_larger_than_an_event_may_be(tmp_path, monkeypatch, reference):
    """Past EVENT_LIMIT without an event start the file is not in our layout (one minified
    line); it was refused as "an event larger than 64 MB"."""
    monkeypatch.setattr(kineto, "EVENT_LIMIT", 8192)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 512)
    filler = [{"ph": "i", "name": f"m{i}", "pid": 1, "tid": 1, "ts": 1} for i in range(300)]
    path = tmp_path / "t.json"
    path.write_text(
        '{\n  "traceEvents": [\n' + ",\n".join(map(block, E[:2])) + ",\n  " + ",".join(map(mini, E[2:] + filler)) + "]}"
    )
    out = result(path)
    assert out == reference


@pytest.mark.parametrize("chunk", [64, 97, 256, 1000])
def test_cuts_at_every_offset_agree(tmp_path, monkeypatch, chunk):
    """Read sizes that put the read boundary at every offset of events of many sizes (an
    event split exactly across it included; reads of CHUNK_BYTES follow the header's first
    64 KB): all three layouts, the same rows."""
    monkeypatch.setattr(kineto, "CHUNK_BYTES", chunk)
    events = [{"ph": "i", "name": "x" * 70_000, "pid": 1, "tid": 1, "ts": 1}]  # past the first 64 KB
    for i in range(60):
        events += [
            launch(100 + 20 * i, i),
            kernel(101 + 20 * i + (i % 7) / 1000, 3 + i % 5, i, name="k" * (1 + i % 37)),
        ]
    results = []
    for name, text in three_layouts(events, native_tail=',\n  "traceName": "x"'):
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        con = open_traces([path])  # one ingest for both checks (analyze only reads the tables)
        assert con.execute("SELECT count(*), sum(dur_ns), count(DISTINCT name) FROM kernels").fetchall() == [
            (60, sum(1000 * (3 + i % 5) for i in range(60)), 37)
        ]
        out = analyze(con)
        out.pop("sources")
        results.append(out)
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize("sep", ["\n", ",,\n", ", ,\n"])
def test_commas_at_a_cut_are_checked(tmp_path, monkeypatch, sep):
    """A missing or doubled comma between two events, where the region is cut, is not valid
    JSON: each cut file alone parsed, so it passed unseen. (Reads of 128 bytes after the
    header's first 64 KB: a cut before every event.)"""
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 128)
    events = [{"ph": "i", "name": "x" * 70_000, "pid": 1, "tid": 1, "ts": 1}]  # past the first 64 KB
    events += [kernel(10 + 10 * i, 5, i) for i in range(20)]
    path = tmp_path / "t.json"
    path.write_text(
        '{\n  "traceEvents": [\n'
        + ",\n".join(map(block, events[:10]))
        + sep
        + ",\n".join(map(block, events[10:]))
        + "\n  ]\n}\n"
    )
    with pytest.raises(InputError, match="malformed JSON"):
        open_traces([path])


def test_a_comma_after_the_last_event_is_refused(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{\n  "traceEvents": [\n' + ",\n".join(map(block, E)) + ",\n  ]\n}\n")
    with pytest.raises(InputError, match="malformed JSON"):
        open_traces([path])


@pytest.mark.parametrize(
    "tail, problem",
    [
        ("", "truncated"),  # cut right after "\n  ]"
        (",\n", "after traceEvents"),
        (',\n  "distributedInfo": {"rank": 3', "after traceEvents"),  # the rank was silently lost
        (',\n  "distributedInfo": {"rank": 3}\n} trailing', "after traceEvents"),
        (", 5, 6}", "after traceEvents"),
        (',,\n  "a": 1}', "after traceEvents"),
    ],
)
def test_what_follows_the_events_must_be_json(tmp_path, tail, problem):
    path = tmp_path / "t.json"
    path.write_text('{\n  "traceEvents": [\n' + ",\n".join(map(block, E)) + "\n  ]" + tail)
    with pytest.raises(InputError, match=problem):
        open_traces([path])


FULL = '{\n  "traceEvents": [\n' + ",\n".join(map(block, E)) + "\n  ]\n}\n"


@pytest.mark.parametrize(
    "end",
    [
        FULL.rindex("  }") + 3,  # right after the last event's "}" (read again by the streaming parser)
        FULL.rindex("  }") + 4,
        FULL.rindex("  },") + 5,  # after a comma
        FULL.rindex('"dur"'),  # inside an event
    ],
)
def test_truncated_after_or_inside_an_event(tmp_path, end):
    path = tmp_path / "t.json"
    path.write_text(FULL[:end])
    with pytest.raises(InputError, match="truncated"):
        open_traces([path])


@pytest.mark.parametrize("layout", ["native", "lines", "min"])
def test_keys_after_the_events_in_every_layout(tmp_path, layout):
    """distributedInfo and deviceProperties after traceEvents: the streaming parser dropped
    them (rank = the file's position, no device name)."""
    after = {"distributedInfo": {"rank": 3, "world_size": 4}, "deviceProperties": [{"id": 0, "name": "H200"}]}
    keys = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in after.items())
    text = {
        "native": '{\n  "traceEvents": [\n' + ",\n".join(map(block, E)) + "\n  ],\n  " + keys + "\n}\n",
        "lines": '{"traceEvents": [\n' + ",\n".join(map(line, E)) + "\n], " + keys + "}\n",
        "min": '{"traceEvents":[' + ",".join(map(mini, E)) + "]," + keys + "}",
    }[layout]
    path = tmp_path / "t.json"
    path.write_text(text)
    con = open_traces([path])
    assert con.execute("SELECT rank FROM sources").fetchall() == [(3,)]
    assert con.execute("SELECT rank, device, name FROM devices").fetchall() == [(3, 0, "H200")]
    assert con.execute("SELECT DISTINCT rank FROM kernels").fetchall() == [(3,)]
    assert dict(con.execute("SELECT key, value FROM meta").fetchall()) == {
        "distributedInfo": '{"rank":3,"world_size":4}'
    }


def texts(events: list[str]) -> dict[str, str]:
    """Raw event texts (one line each) in the three layouts."""
    return {
        "indented": '{\n  "traceEvents": [\n' + ",\n".join("  " + e for e in events) + "\n  ]\n}\n",
        "lines": '{"traceEvents": [\n' + ",\n".join(events) + "\n]}\n",
        "min": '{"traceEvents":[' + ",".join(events) + "]}",
    }


def test_duplicate_keys_first_wins_in_every_layout(tmp_path):
    """DuckDB keeps the first of duplicate keys, ijson's builder kept the last."""
    dup = (
        '{"ph": "X", "cat": "kernel", "name": "first", "name": "second", "pid": 0, "tid": 7, "ts": 10,'
        ' "ts": 99, "dur": 5, "args": {"device": 0, "stream": 7, "stream": 9, "correlation": 1, "device": 3},'
        ' "args": {"device": 5}}'
    )
    for layout, text in texts([line(launch(5, 1)), dup, line(kernel(20, 10, 2))]).items():
        path = tmp_path / f"{layout}.json"
        path.write_text(text)
        rows = open_traces([path]).execute("SELECT name, start_ns, device, stream FROM kernels ORDER BY 2").fetchall()
        assert rows == [("first", 10_000, 0, 7), ("k", 20_000, 0, 7)], layout


def test_undecodable_bytes_in_fields_not_read_are_counted(tmp_path):
    bad = [
        (
            b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,'
            b' "args": {"device": 0, "stream": 7, "Concrete Inputs": "\xff\xfe"}}'
        ),
        (
            b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 5,'
            b' "args": {"device": 0, "stream": 7, "\xff": 1}}'
        ),
    ]
    for layout, text in texts(["@0", "@1", line(kernel(20, 10, 2))]).items():
        path = tmp_path / f"{layout}.json"
        path.write_bytes(text.encode().replace(b"@0", bad[0]).replace(b"@1", bad[1]))
        out = result(path)
        assert out["warnings"] == {"undecodable_bytes": 2}, layout
        assert out["devices"][0]["kernel_count"] == 3


@pytest.mark.parametrize("layout", ["indented", "lines", "min"])
def test_an_event_dense_with_arguments_not_read(tmp_path, layout):
    """17 MB of small values in one event's args: DuckDB's reader runs out of memory on it
    (and refuses any event over 32 MB); the streaming parser drops what is not read."""
    big = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::big",
        "pid": 1,
        "tid": 1,
        "ts": 6,
        "dur": 2,
        "args": {"External id": 9, "Input Strides": [1] * 6_000_000},
    }
    text = texts([line(e) for e in [*E[:2], big, *E[2:]]])[layout]
    path = tmp_path / "t.json"
    path.write_text(text)
    con = open_traces([path])
    assert con.execute("SELECT count(*) FROM kernels").fetchall() == [(2,)]
    assert con.execute("SELECT name, start_ns, external_id FROM cpu_ops ORDER BY start_ns").fetchall() == [
        ("aten::mm", 4_000, 1),
        ("aten::big", 6_000, 9),
    ]


def test_a_failed_fast_pass_leaves_nothing_behind(tmp_path, monkeypatch):
    """The second file's fast pass inserts rows (flushed to the tables) before a malformed
    cut sends it to the streaming parser: the first file's rows stay, the second's are
    there once, with their real rank."""
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(kineto, "STAGED_EVENTS", 16)
    first = [kernel(10 + 10 * i, 5, i, name="a") for i in range(200)]
    second = [kernel(10 + 10 * i, 5, i, name="b") for i in range(200)]
    (tmp_path / "a.json").write_text(
        '{\n  "traceEvents": [\n' + ",\n".join(map(block, first)) + '\n  ],\n  "distributedInfo": {"rank": 0}\n}\n'
    )
    (tmp_path / "b.json").write_text(
        '{\n  "traceEvents": [\n'
        + ",\n".join(map(block, second))
        + ',\n  {\n    "ph": "X", "args": {"l": [\n  {"a": 1}\n]}\n  }'
        + '\n  ],\n  "distributedInfo": {"rank": 1}\n}\n'
    )
    con = open_traces([tmp_path])
    assert con.execute(
        "SELECT rank, name, count(*), count(DISTINCT correlation) FROM kernels GROUP BY ALL ORDER BY 1"
    ).fetchall() == [(0, "a", 200, 200), (1, "b", 200, 200)]
    assert con.execute("SELECT source_id, rank, event_count FROM sources ORDER BY 1").fetchall() == [
        (0, 0, 200),
        (1, 1, 201),
    ]


def test_the_reader_stops_when_staging_fails():
    """A failed or interrupted stage stops the reading thread at once: it went on cutting
    the rest of the file (seconds per GB, and every run written to the temporary folder)
    before Ctrl-C took effect or the streaming parser began."""
    made = []

    def paths():
        for i in range(10_000):
            made.append(i)
            yield f"chunk-{i}"
        return b""

    def stage(batch):
        raise KeyboardInterrupt

    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        kineto._staged_in_batches(paths(), stage, 3)
    assert len(made) <= 3 + 2
    assert threading.active_count() <= before


def test_header_that_ends_at_the_first_read(tmp_path, monkeypatch, reference):
    """A header whose "[" is the last byte of the first 64 KB read: the layout is still
    detected (it fell back to the streaming parser, ~5x slower)."""
    monkeypatch.setattr(kineto, "_stream_events", lambda *a: pytest.fail("the streaming parser ran"))
    head = '{\n  "pad": "",\n  "traceEvents": ['
    head = head.replace('""', '"' + "x" * ((1 << 16) - len(head)) + '"')
    path = tmp_path / "t.json"
    path.write_text(head + "\n" + ",\n".join(map(block, E)) + "\n  ]\n}\n")
    assert path.read_bytes().index(b"[") == (1 << 16) - 1
    assert result(path) == reference


def test_ranges_with_the_same_times_nest_by_external_id(tmp_path, monkeypatch):
    """An aten::item and its aten::_local_scalar_dense with the same start and end (a
    microsecond trace, or rounding), written child first, over many cut files parsed on
    parallel threads: the op that started first (the smaller External id) encloses the
    other in every layout and run. Which one did depended on the order the rows were
    stored in, so the syncs' op changed between layouts and runs."""
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 4096)
    events = [{"ph": "i", "name": "x" * 70_000, "pid": 1, "tid": 1, "ts": 1}, kernel(5, 3, 10**6)]
    for i in range(300):
        ts = 100 + 20 * i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::_local_scalar_dense",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 8,
                "args": {"External id": 2 * i + 2},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::item",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 8,
                "args": {"External id": 2 * i + 1},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaStreamSynchronize",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 5,
                "args": {"correlation": i + 1},
            },
        ]
    results = []
    for layout, text in three_layouts(events):
        path = tmp_path / f"{layout}.json"
        path.write_text(text)
        con = open_traces([path])
        assert con.execute("SELECT name, depth, count(*) FROM cpu_ops GROUP BY ALL ORDER BY 1").fetchall() == [
            ("aten::_local_scalar_dense", 1, 300),
            ("aten::item", 0, 300),
        ], layout
        out = analyze(con)
        assert [s["op"] for s in out["syncs"]] == ["aten::item"] * 300, layout
        out.pop("sources")
        results.append(out)
    assert results[0] == results[1] == results[2]


def test_duckdb_runs_the_threads_its_memory_limit_is_sized_for(tmp_path):
    """Two worker threads whatever the core count: at 3 the JSON parse thrashed under its
    memory limit (trace/load.py)."""
    from wanscope.trace.load import DUCKDB_THREADS

    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(block(e) for e in EVENTS) + "\n]}")
    with open_traces([path]) as con:
        threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    assert (threads, DUCKDB_THREADS) == (2, 2)
