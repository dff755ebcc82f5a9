"""`wanscope profile --kernels triton` profiles the DiT on the fused custom ops (on the CPU their
torch twins run under the same op names, and the notes say so), and the run object says which
kernels ran."""

import json
import os
import subprocess
import sys

from wanscope.profile.result import KERNELS_CPU_NOTE
from wanscope.trace import open_traces


def test_profile_runs_on_the_fused_ops(tmp_path):
    # tests/kernels sets TRITON_INTERPRET=1 for this pytest process; the interpreter would run
    # the child's kernels element by element (it ran out of 23 GB), so the child runs without it.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
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
            "--kernels",
            "triton",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["run"]["kernels"] == "triton"
    assert (KERNELS_CPU_NOTE in report["notes"]) == (report["run"]["device"] == "cpu")
    assert (KERNELS_CPU_NOTE in " ".join(r.stdout.split())) == (report["run"]["device"] == "cpu")  # rich wraps it
    con = open_traces([tmp_path / "trace.json.gz"])
    ops = dict(con.execute("SELECT name, count(*) FROM cpu_ops WHERE name LIKE 'wanscope::%' GROUP BY name").fetchall())
    # tiny: 2 blocks x 1 batched CFG forward (B=2) in one step; per block one norm_modulate, two
    # add_norm_modulate, one gated_add, and q/k rms_norm_rope in self- and cross-attention.
    assert ops == {
        "wanscope::norm_modulate": 2,
        "wanscope::add_norm_modulate": 4,
        "wanscope::gated_add": 2,
        "wanscope::rms_norm_rope": 8,
    }


def test_profile_fast_mode(tmp_path):
    """`profile --mode fast` profiles what `generate --mode fast` runs: the fused ops (triton by
    default) with the fast blocks; the run object and the notes say so."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
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
            "--mode",
            "fast",
            "--fast",
            "exact_blocks=-1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "report.json").read_text())["run"]
    spec = "linears=qkv,ffn_up,ffn_down int8_attention=auto pv_fp8=false exact_blocks=-1 fast_accum=true"
    assert (run["mode"], run["fast"], run["kernels"]) == ("fast", spec, "triton")
    assert f"Fast mode, not exact (FP8 GEMMs, INT8 Q K^T where our Hopper kernel runs): {spec}." in " ".join(
        r.stdout.split()
    )
