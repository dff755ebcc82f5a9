"""Top-level keys other than ``traceEvents``: any order, any JSON type, in every layout.

ROCm traces carry ``"roctracer_version": 4.1`` after the events; a trace re-saved by
Python's ``json`` may put any key anywhere. Each key is kept in ``meta`` as the same text
whichever layout the file has (so whichever ingest path reads it); a malformed
``traceEvents`` stays one line naming the file, exit code 2.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

EVENTS = [
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": 5,
        "dur": 1,
        "args": {"correlation": 1},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 10,
        "dur": 5,
        "args": {"device": 0, "stream": 7, "correlation": 1},
    },
]

# Every JSON type, and the numbers orjson does not parse though JSON allows them.
KEYS = {
    "roctracer_version": 4.1,
    "exponent": 2.5e3,
    "huge_float": "1e400",  # written as the bare number below
    "huge_int": "18446744073709551617123",  # likewise
    "nested": {"a": [1.25, None, True, "x"]},
    "none": None,
    "flag": False,
    "text": "hip",
    "distributedInfo": {"rank": 3, "world_size": 4.0},
}
# What meta holds for each: strings as they are, the rest as JSON.
META = {
    "roctracer_version": "4.1",
    "exponent": "2500.0",
    "huge_float": "null",  # beyond a double: infinity, which JSON writes as null
    "huge_int": "18446744073709551617123",
    "nested": '{"a":[1.25,null,true,"x"]}',
    "none": "null",
    "flag": "false",
    "text": "hip",
    "distributedInfo": '{"rank":3,"world_size":4.0}',
}
BARE = ("huge_float", "huge_int")


def keys_text(keys: list[str], sep: str = ", ") -> str:
    return sep.join(f"{json.dumps(k)}: {KEYS[k] if k in BARE else json.dumps(KEYS[k])}" for k in keys)


def block(e) -> str:
    return "  {\n    " + ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()) + "\n  }"


def layouts(before: list[str], after: list[str]) -> dict[str, str]:
    """The file text in torch.profiler's block layout, one event per line, minified and
    Python's ``json.dumps(indent=2)`` (events at another indentation), with ``before``
    keys ahead of traceEvents and ``after`` keys behind it."""
    head = keys_text(before) + ", " if before else ""
    tail = ", " + keys_text(after) if after else ""
    events_block = ",\n".join(map(block, EVENTS))
    minified = ",".join(json.dumps(e, separators=(",", ":")) for e in EVENTS)
    indented = ",\n".join("    " + json.dumps(e, indent=2).replace("\n", "\n    ") for e in EVENTS)
    return {
        "native": "{\n  " + head + '"traceEvents": [\n' + events_block + "\n  ]" + tail + "\n}\n",
        "lines": "{" + head + '"traceEvents": [\n' + ",\n".join(map(json.dumps, EVENTS)) + "\n]" + tail + "}\n",
        "min": "{" + head + '"traceEvents":[' + minified + "]" + tail + "}",
        "python_indent": "{\n  " + head + '"traceEvents": [\n' + indented + "\n  ]" + tail + "\n}",
    }


SPLITS = {
    "all_after": ([], list(KEYS)),
    "all_before": (list(KEYS), []),
    "interleaved": (list(KEYS)[::2], list(KEYS)[1::2]),
}


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("layout", ["native", "lines", "min", "python_indent"])
def test_top_level_keys_of_any_type_in_any_order(tmp_path, split, layout):
    before, after = SPLITS[split]
    path = tmp_path / "t.json"
    path.write_text(layouts(before, after)[layout])
    con = open_traces([path])
    assert dict(con.execute("SELECT key, value FROM meta").fetchall()) == META
    # distributedInfo.rank is read wherever it sits; the events are all there
    assert con.execute("SELECT rank, event_count FROM sources").fetchall() == [(3, 2)]
    (d,) = analyze(con)["devices"]
    assert (d["rank"], d["kernel_count"], d["busy_ns"]) == (3, 1, 5_000)


def test_top_level_keys_of_any_type_through_the_cli(tmp_path):
    """The ROCm case end to end: a minified trace ending in a non-integer version."""
    path = tmp_path / "rocm.json"
    path.write_text(layouts([], ["roctracer_version", "nested"])["min"])
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "analyze", str(path), "--format", "json"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["devices"][0]["kernel_count"] == 1


@pytest.mark.parametrize("events", ["4.1", '{"ph": "X"}', '"x"', "null"])
@pytest.mark.parametrize("where", ["first", "last"])
def test_top_level_keys_do_not_excuse_a_malformed_trace_events(tmp_path, events, where):
    others = keys_text(["roctracer_version", "huge_int", "nested"])
    text = (
        "{" + others + ', "traceEvents": ' + events + "}"
        if where == "last"
        else '{"traceEvents": ' + events + ", " + others + "}"
    )
    path = tmp_path / "bad.json"
    path.write_text(text)
    r = subprocess.run([sys.executable, "-m", "wanscope", "analyze", str(path)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stdout == "" and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert str(path) in line and "traceEvents is not a list" in line
