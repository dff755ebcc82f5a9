"""The Python API (``wanscope.open``): docs/api.md's example runs as written, the DataFrames hold
the analyze JSON's values, and ``import wanscope`` loads none of torch, DuckDB or pandas."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import wanscope
from wanscope.data import default_trace

REPO = Path(__file__).resolve().parents[1]


def test_the_documented_example_runs(capsys):
    code = re.search(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S).group(1)
    exec(compile(code, "docs/api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "kernels" in out and "attention" in out


def test_dataframes_hold_the_analyze_values():
    with wanscope.open(default_trace()) as t:
        doc = t.analyze()
        device = doc["devices"][0]
        kernels, categories, gaps = t.kernels(), t.categories(), t.gaps()
        assert kernels.to_dict("records") == [{"rank": 0, "device": 0, **k} for k in device["top_kernels"]]
        assert categories["total_ns"].sum() == device["kernel_time_ns"] + device["memop_time_ns"]
        assert gaps["dur_ns"].tolist() == [g["dur_ns"] for g in device["gaps"]["largest"]]
        assert len(t.syncs()) == len(doc["syncs"]) and t.steps().empty == (doc["steps"] == [])
        count = t.sql("SELECT count(*) FROM kernels").fetchall()[0][0]
        assert count == device["kernel_count"]
        ops = t.host_ops()
        (thread,) = doc["host"]["threads"]
        assert ops.drop(columns=["rank", "pid", "tid"]).to_dict("records") == thread["ops"]
        assert t.python_frames()["self_ns"].tolist() == [f["self_ns"] for f in doc["host"]["python_frames"]]
        (roof,) = doc["roofline"]["devices"]
        assert t.roofline()["lost_ns"].tolist() == [r["lost_ns"] for r in roof["ops"]]
        assert t.roofline(by="category")["category"].tolist() == [r["category"] for r in roof["categories"]]
        assert t.roofline("uncounted")["gpu_ns"].sum() == roof["kernel_ns"] - roof["counted_ns"]


def test_measured_peaks_reach_the_rooflines():
    with wanscope.open(default_trace(), peak_tflops=800, peak_bandwidth_gbps=4000) as t:
        roof = t.roofline()
        (device,) = t.analyze()["roofline"]["devices"]
        assert device["peaks"]["bf16_tflops"] == 800 and device["peaks"]["bandwidth_gbps"] == 4000
        assert (roof["roof_tflops"].dropna() <= 800 + 1e-9).all()
        with pytest.raises(ValueError, match="by="):
            t.roofline(by="kernel")


def test_import_wanscope_loads_no_heavy_module():
    code = "import sys, wanscope; print(sorted(m for m in ('torch', 'duckdb', 'pandas') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr
