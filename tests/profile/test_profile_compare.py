"""``wanscope profile --compare-compile`` on the CPU (tiny preset): both runs' reports, the diff
files, compilation cost kept apart from step time, and the compiled trace running each block as
one compiled region with no block-part ranges inside."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from wanscope.trace import open_traces

pytestmark = pytest.mark.cpu_only


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "wanscope",
            "profile",
            "--preset",
            "tiny",
            "--profile-steps",
            "1",
            "--compare-compile",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return out, r


def ranges(trace) -> dict[str, int]:
    con = open_traces([str(trace)])
    return dict(
        con.execute(
            "SELECT name, count(*) FROM cpu_ops WHERE name LIKE 'wanscope/block/%' "
            "OR name LIKE 'Torch-Compiled Region%' GROUP BY name"
        ).fetchall()
    )


def test_files_and_the_compile_object(compared):
    out, r = compared
    assert sorted(p.name for p in out.iterdir()) == ["compiled", "diff.html", "diff.json", "eager"]
    reports = {}
    for label in ("eager", "compiled"):
        assert sorted(p.name for p in (out / label).iterdir()) == ["report.html", "report.json", "trace.json.gz"]
        reports[label] = json.loads((out / label / "report.json").read_text())
    assert (reports["eager"]["run"]["compile"], reports["compiled"]["run"]["compile"]) == (False, True)
    d = json.loads((out / "diff.json").read_text())
    assert (d["base"]["label"], d["new"]["label"]) == (
        str(out / "eager" / "trace.json.gz"),
        str(out / "compiled" / "trace.json.gz"),
    )
    c = d["compile"]
    assert c["warmup_steps"] == 1
    for label, rep in reports.items():
        assert c["warmup_wall_ns"][label] == rep["run"]["step_wall_ns"][0] > 0
        (step,) = rep["steps"]
        assert c["mean_step_cpu_ns"][label] == step["cpu_dur_ns"]
    assert "(compilation included)" in r.stdout and "profiled steps, mean CPU range: eager" in r.stdout
    assert "warm-up (1 step, host wall time)" in r.stdout


def test_compiled_blocks_are_one_region_each(compared):
    out, _ = compared
    # one profiled step x 1 batched CFG forward (--cfg auto at tiny's 32 tokens) x 2 blocks
    assert ranges(out / "eager" / "trace.json.gz") == {
        "wanscope/block/self_attn": 2,
        "wanscope/block/cross_attn": 2,
        "wanscope/block/ffn": 2,
    }
    assert ranges(out / "compiled" / "trace.json.gz") == {"Torch-Compiled Region: 0/0": 2}
