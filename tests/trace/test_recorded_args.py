"""torch.profiler's recorded arguments kept at ingest: ``cpu_ops.input_dims``, ``input_types``
and ``concrete_inputs`` hold each op's "Input Dims", "Input type" and "Concrete Inputs" as JSON
text, in both of the Kineto reader's paths; sources without them give NULL."""

from __future__ import annotations

import gzip
import json

import pytest
import synthetic_traces
from shared_fixtures import shared_fixture

from wanscope.trace import kineto, open_traces

H200 = "kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz"
COLUMNS = {"input_dims": "Input Dims", "input_types": "Input type", "concrete_inputs": "Concrete Inputs"}


def test_every_op_keeps_its_recorded_arguments():
    path = shared_fixture(H200)
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    want = sorted(
        (e["name"], int(round(e["ts"] * 1000)), *(json.dumps(e["args"][k]) for k in COLUMNS.values()))
        for e in events
        if e.get("cat") == "cpu_op"
    )
    con = open_traces([path])
    rows = con.execute(f"SELECT name, start_ns, {', '.join(COLUMNS)} FROM cpu_ops WHERE kind = 'op'").fetchall()
    got = sorted((n, s, *(json.dumps(json.loads(v)) for v in vals)) for n, s, *vals in rows)
    assert len(got) == len(want) == 9718
    assert got == want
    # the SDPA call of self-attention as recorded: is_causal False at its 6th argument
    (types, concrete) = con.execute(
        "SELECT input_types, concrete_inputs FROM cpu_ops WHERE name = 'aten::scaled_dot_product_attention' LIMIT 1"
    ).fetchone()
    assert json.loads(types)[:3] == ["c10::BFloat16"] * 3
    assert json.loads(concrete)[5] == "False"


EVENTS = [
    {
        **synthetic_traces.host("aten::gelu", 10, 5),
        "args": {"Input Dims": [[2, 3]], "Input type": ["c10::BFloat16"], "Concrete Inputs": [""]},
    },
    synthetic_traces.host("aten::empty", 20, 5),  # recorded without shapes
    {**synthetic_traces.host("python frame", 30, 5, cat="python_function"), "args": {"Input type": ["float"]}},
]


def _block(e) -> str:
    """One event in torch.profiler's layout (``  {``, inner lines at four spaces, ``  }``)."""
    return "  {\n    " + ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()) + "\n  }"


@pytest.mark.parametrize("layout", ["native", "minified"])
def test_both_reader_paths_keep_them(tmp_path, monkeypatch, layout):
    path = tmp_path / "t.json"
    if layout == "native":  # cut into arrays for DuckDB's reader; the streaming parser must not run
        monkeypatch.setattr(kineto, "_stream_events", lambda *a: pytest.fail("the streaming parser ran"))
        path.write_text('{\n  "traceEvents": [\n' + ",\n".join(map(_block, EVENTS)) + "\n  ]\n}\n")
    else:  # ijson's streaming parser
        path.write_text(json.dumps({"traceEvents": EVENTS}, separators=(",", ":")))
    con = open_traces([path])
    rows = con.execute(f"SELECT name, {', '.join(COLUMNS)} FROM cpu_ops ORDER BY start_ns").fetchall()
    assert [(n, *(None if v is None else json.loads(v) for v in vals)) for n, *vals in rows] == [
        ("aten::gelu", [[2, 3]], ["c10::BFloat16"], [""]),
        ("aten::empty", None, None, None),
        ("python frame", None, None, None),  # only ops keep them
    ]
