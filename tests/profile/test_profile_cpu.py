"""``wanscope profile --preset tiny --profile-steps 2`` end to end on the CPU: the trace, both
reports, two steps whose times are the trace's own step ranges, no sync in the loop by default,
and with ``--legacy-step-lookup`` one would-be sync per step at the sampler's ``.item()``."""

from __future__ import annotations

import gzip
import inspect
import json
import subprocess
import sys
from decimal import Decimal

import pytest

torch = pytest.importorskip("torch")

from cli_context import run_main as wanscope  # in this process: torch's imports were half a run
from cli_context import sigint_default

from wanscope.analysis.host import host as analyze_host
from wanscope.profile.result import CPU_NOTE, cfg_note
from wanscope.trace import open_traces
from wanscope.wan.options import RANDOM_NOTE
from wanscope.wan.sampler import FlowSampler

pytestmark = pytest.mark.cpu_only(reason="a GPU run profiles the 1.3B preset")
TINY = ["profile", "--preset", "tiny", "--profile-steps", "2"]


def run_profile(out, *extra):
    r = wanscope(*TINY, *extra, "--out", str(out))
    assert r.returncode == 0, r.stderr
    return r, json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    r, report = run_profile(out)
    return out, r, report


@pytest.fixture(scope="module")
def legacy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile_legacy")
    r, report = run_profile(out, "--legacy-step-lookup")
    return out, r, report


def trace_steps(trace_path) -> dict[int, tuple[int, int]]:
    """step -> (start_ns, dur_ns) of the ``wanscope/step#k`` ranges, from the trace's decimal text."""
    doc = json.load(gzip.open(trace_path, "rt"), parse_float=Decimal)
    out = {}
    for e in doc["traceEvents"]:
        if e.get("name", "").startswith("wanscope/step#"):
            out[int(e["name"].split("#")[1])] = (
                int(round(Decimal(e["ts"]) * 1000)),
                int(round(Decimal(e["dur"]) * 1000)),
            )
    return out


def test_writes_trace_and_both_reports_and_nothing_else(default_run):
    out, r, report = default_run
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "trace.json.gz"]
    html = (out / "report.html").read_text()
    assert "RANDOM WEIGHTS" in html and "need a CUDA GPU" in html
    assert "wanscope profile: tiny 64x64x5, steps 1-2 of 4, RANDOM WEIGHTS" in html
    assert r.stderr.startswith(f"wanscope: {RANDOM_NOTE}\n")
    assert "profiling" in r.stderr and "4/4" not in r.stderr and "3/3" in r.stderr  # the progress bar
    assert "wanscope profile: tiny 64x64x5, steps 1-2 of 4, RANDOM WEIGHTS" in r.stdout
    doc = json.load(gzip.open(out / "trace.json.gz", "rt"))
    assert doc["wanscope_run"]["random_weights"] is True and doc["wanscope_run"]["note"] == RANDOM_NOTE


def test_run_object(default_run):
    _, _, report = default_run
    run = report["run"]
    assert run["note"] == RANDOM_NOTE and run["random_weights"] is True and run["checkpoint"] is None
    assert (run["preset"], run["width"], run["height"], run["frames"]) == ("tiny", 64, 64, 5)
    assert (run["schedule_steps"], run["warmup_steps"], run["profiled_steps"]) == (4, 1, [1, 2])
    assert (run["attention"], run["compile"], run["legacy_step_lookup"]) == ("auto", False, False)
    assert (run["device"], run["dtype"], run["capture"], run["gpu"]) == ("cpu", "fp32", "torch.profiler", None)
    assert run["versions"]["torch"] == torch.__version__ and run["versions"]["cuda"] is None
    assert run["dit"] == {"dim": 64, "num_layers": 2, "num_heads": 2, "ffn_dim": 128}
    assert run["tokens"] == 2 * 4 * 4  # latents [1, 16, 2, 8, 8] in 1x2x2 patches
    assert (run["cfg"], run["cfg_auto"]) == ("batched", True)  # --cfg auto at 32 tokens
    assert run["peak_memory_bytes"] == {"text_encoding": None, "denoising": None, "vae_decode": None}
    assert list(run["stage_wall_ns"]) == ["text_encoding", "denoising", "vae_decode"]
    assert all(v > 0 for v in run["stage_wall_ns"].values())
    assert len(run["step_wall_ns"]) == 3
    assert report["notes"][:3] == [RANDOM_NOTE, CPU_NOTE, cfg_note(run)]
    assert cfg_note(run) == (
        "CFG batched: cond and uncond as one B=2 DiT forward per step "
        "(--cfg auto, L = 32 tokens <= 8,192: batched up to it, sequential above)."
    )


def test_two_steps_whose_times_are_the_traces(default_run):
    out, _, report = default_run
    ranges = trace_steps(out / "trace.json.gz")
    assert sorted(ranges) == [1, 2]  # the warm-up step is not in the trace
    assert [(s["step"], s["cpu_start_ns"], s["cpu_dur_ns"]) for s in report["steps"]] == [
        (k, *ranges[k]) for k in (1, 2)
    ]
    assert all(s["gpu_dur_ns"] is None for s in report["steps"])
    # the host's own clock around each step holds the range, plus the loop's overhead: not a
    # range of some other step (a loaded machine stretches the overhead, never past the step)
    for s in report["steps"]:
        wall = report["run"]["step_wall_ns"][s["step"]]
        assert 0 <= wall - s["cpu_dur_ns"] < max(2_000_000, wall // 4), (wall, s)


def test_no_sync_in_the_loop_by_default(default_run):
    _, r, report = default_run
    assert report["syncs"] == []
    assert "host-device syncs: none" in r.stdout


def test_host_time_by_op(default_run):
    out, r, report = default_run
    h = report["host"]
    con = open_traces([str(out / "trace.json.gz")])
    (tid,) = con.execute("SELECT DISTINCT tid FROM steps").fetchone()
    main = next(t for t in h["threads"] if t["tid"] == tid)  # the thread that ran the steps: busy all through
    assert h["window"] == "steps" and main["busy_ns"] == sum(s["cpu_dur_ns"] for s in report["steps"])
    assert sum(op["self_ns"] for op in main["ops"]) == main["busy_ns"]
    assert main["ops"][-1]["name"] == "other" and len(main["ops"]) == 11
    assert "host time by op" in r.stdout
    full = next(t for t in analyze_host(con, top=100_000)["threads"] if t["tid"] == tid)["ops"]
    linear = next(op for op in full if op["name"] == "aten::linear")
    # 2 steps x 1 batched CFG forward x (2 blocks x (q, k, v, o twice + 2 FFN) + text 2 + time 2 + projection 1
    # + head 1)
    assert linear["count"] == 2 * (2 * 10 + 6) and 0 < linear["self_ns"] < linear["total_ns"]


def lookup_frame() -> str:
    """``wanscope/wan/sampler.py(<line>): _lookup``: torch.profiler names a Python frame by its
    function's first line."""
    _, first = inspect.getsourcelines(FlowSampler._lookup)
    return f"wanscope/wan/sampler.py({first}): _lookup"


def test_legacy_step_lookup_one_would_sync_per_step(legacy_run):
    out, r, report = legacy_run
    assert report["run"]["legacy_step_lookup"] is True
    syncs = report["syncs"]
    assert [(s["kind"], s["op"], s["frame"], s["api"]) for s in syncs] == [
        ("would_sync", "aten::item", lookup_frame(), None)
    ] * 2
    for sync, step in zip(syncs, report["steps"]):  # one inside each step's range
        assert step["cpu_start_ns"] <= sync["start_ns"] < step["cpu_start_ns"] + step["cpu_dur_ns"]
        assert 0 < sync["wait_ns"] < step["cpu_dur_ns"]
    assert r.stdout.count("│ would_sync") == 2  # rows of the syncs table


def test_ctrl_c_leaves_no_partial_file(tmp_path):
    """SIGINT once the text encoder is done (the DiT loads, steps run or the trace is written):
    exit 130 with one line, and nothing half-written in --out. 30 profiled steps, so that the
    signal lands inside the run on a loaded machine too."""
    import signal

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wanscope", *TINY, "--steps", "40", "--profile-steps", "30", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    for line in proc.stderr:
        if line.startswith("text encoding:"):
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    assert proc.wait() == 130, rest
    assert rest.splitlines()[-1] == "wanscope: interrupted" and "Traceback" not in rest
    assert rest.splitlines()[-2:-1] != [""]  # one line, not click's blank line before it
    assert [p.name for p in out.iterdir()] == []


def test_hopper_on_the_cpu_is_one_line_before_any_run(tmp_path):
    """``--attention hopper`` needs an sm_90 GPU: refused before the output folder exists."""
    out = tmp_path / "p"
    r = wanscope(*TINY, "--attention", "hopper", "--out", str(out))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "wanscope: error: --attention hopper needs a CUDA device, got cpu; use auto (the default) or sdpa"
    ], r.stderr
    assert not out.exists()
