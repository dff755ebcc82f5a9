"""``wanscope profile -- COMMAND`` on programs the tests write as users write them, none of which
imports wanscope, run where wanscope cannot be imported (a ``sitecustomize`` of the test's hides
it, and our bootstrap must chain to it): a training loop's optimizer steps, diffusers' WanPipeline
denoising steps (tiny random config) with the syncs it makes, ``wanscope.step()`` markers, a
program with no steps, and the refusals and failures."""

from __future__ import annotations

import gzip
import inspect
import json
import linecache
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_context import run_main, sigint_default
from shared_fixtures import HANG_S

# The user's own sitecustomize: it must still run under ours, and it hides wanscope from the
# profiled program (only there: WANSCOPE_PROFILE is set in the program's environment alone).
USER_SITECUSTOMIZE = """
import os, sys
if "WANSCOPE_PROFILE" in os.environ:
    sys.modules["wanscope"] = None
    os.environ["USER_SITECUSTOMIZE_RAN"] = "1"
"""

TRAIN = """
import importlib.util, os, sys
import torch

assert importlib.util.find_spec("wanscope") is None, "wanscope is importable here"
print("argv", sys.argv[1:], "cwd", os.getcwd(), "chained", os.environ.get("USER_SITECUSTOMIZE_RAN"))
print("top mark", os.environ.get("WANSCOPE_PROFILE_TOP"))  # taken out: no process of the program's is the top
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(6):
    loss = model(torch.randn(8, 16)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""

WAN_PIPELINE = """
import torch
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

torch.manual_seed(0)
transformer = WanTransformer3DModel(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
    text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
)
vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                       temperal_downsample=[False, True, True])
scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=transformer, vae=vae, scheduler=scheduler)


def on_step_end(pipe, i, t, kwargs):
    kwargs["latents"].abs().max().item()  # SYNC: one host-device sync per step
    return kwargs


pipe(prompt_embeds=torch.randn(1, 16, 32), negative_prompt_embeds=torch.randn(1, 16, 32), height=32, width=32,
     num_frames=5, num_inference_steps=6, guidance_scale=5.0, output_type="latent", callback_on_step_end=on_step_end)
"""


def profile(tmp_path, program: str, *args, env=None, hide=True):
    """``wanscope profile --out OUT ARGS -- python prog.py --flag x`` in ``tmp_path``."""
    script = tmp_path / "prog.py"
    script.write_text(program)
    site = tmp_path / "usersite"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    environ = dict(os.environ, **(env or {}))
    if hide:
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), environ.get("PYTHONPATH")) if p)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "wanscope", "profile", "--out", str(out), *args]
    argv += ["--", sys.executable, str(script), "--flag", "x"]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=environ)
    return r, out, script


def report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def ranges(out: Path, trace="trace.json.gz") -> list[dict]:
    with gzip.open(out / trace) as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


def inside(e, step) -> bool:
    return step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"]


def test_training_loop_steps_are_its_optimizer_steps(tmp_path):
    r, out, script = profile(tmp_path, TRAIN)
    assert r.returncode == 0, r.stderr
    # the program's own argv, cwd and stdout; the user's sitecustomize ran under ours
    assert f"argv ['--flag', 'x'] cwd {tmp_path} chained 1\ntop mark None\n" in r.stdout
    doc = report(out)
    run = doc["run"]
    assert run["command"] == [sys.executable, str(script), "--flag", "x"] and run["cwd"] == str(tmp_path)
    assert (run["step_rule"], run["step_rule_asked"], run["exit_code"]) == ("optimizer", "auto", 0)
    assert (run["profiled_steps"], run["steps_seen"], run["gpu"], run["device"]) == ([1, 2, 3], 6, None, "cpu")
    assert run["versions"] == {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    assert [s["step"] for s in doc["steps"]] == [1, 2, 3]
    assert "Steps found by the optimizer rule: torch.optim.Optimizer.step calls." in doc["notes"]
    events = ranges(out)
    steps = sorted((e for e in events if e["name"].startswith("wanscope/step#")), key=lambda e: e["ts"])
    assert [s["name"] for s in steps] == ["wanscope/step#1", "wanscope/step#2", "wanscope/step#3"]
    # each step holds one optimizer step, whole: torch's Optimizer.step range ends inside it
    for step in steps:
        assert sum(inside(e, step) for e in events if e["name"] == "Optimizer.step#SGD.step") == 1
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "trace.json.gz"]


def test_a_failing_program_is_analyzed_and_its_status_kept(tmp_path):
    r, out, _ = profile(tmp_path, TRAIN, env={"EXIT_CODE": "3"})
    assert r.returncode == 3
    assert f"wanscope: {sys.executable} exited with status 3; analyzing what was captured\n" in r.stderr
    doc = report(out)
    assert doc["run"]["exit_code"] == 3
    assert "The program exited with status 3; the trace holds what was captured by then." in doc["notes"]


def test_diffusers_steps_are_the_schedulers_with_both_cfg_branches(tmp_path):
    pytest.importorskip("diffusers")
    r, out, script = profile(tmp_path, WAN_PIPELINE, "--profile-steps", "2")
    assert r.returncode == 0, r.stderr
    doc = report(out)
    assert (doc["run"]["step_rule"], doc["run"]["profiled_steps"]) == ("diffusers", [1, 2])
    events = ranges(out)
    steps = sorted((e for e in events if e["name"].startswith("wanscope/step#")), key=lambda e: e["ts"])
    assert [s["name"] for s in steps] == ["wanscope/step#1", "wanscope/step#2"]
    for step in steps:  # cond and uncond: two transformer calls, then the scheduler's step
        calls = [e for e in events if e["name"].startswith("nn.Module: WanTransformer3DModel") and inside(e, step)]
        assert len(calls) == 2
        assert any(
            e["name"].endswith("): step") and "scheduling_unipc" in e["name"] and inside(e, step) for e in events
        )
    # The syncs: the script's, in on_step_end (a frame is named by its function's first line,
    # or by the line running when the profiler started), and those diffusers makes itself.
    import diffusers

    frames = {s["frame"] for s in doc["syncs"]}
    ours = {f for f in frames if not f.startswith("diffusers/")}
    assert ours == {f"{script.name}({def_line(script.read_text().splitlines(), 'on_step_end')}): on_step_end"}
    # one: step 1's callback; step 2's runs after the window closed with its scheduler.step
    assert [s["op"] for s in doc["syncs"] if s["frame"] in ours] == ["aten::item"]
    root = Path(diffusers.__file__).parent.parent
    for frame in frames - ours:
        path, _, rest = frame.partition("(")
        line, name = int(rest.split(")")[0]), rest.split(": ", 1)[1]
        lines = linecache.getlines(str(root / path))
        start = def_line(lines[:line], name)  # the function that holds the line
        assert start <= line < start + len(inspect.getblock(lines[start - 1 :])), frame


def def_line(lines: list[str], name: str) -> int:
    """The 1-based line of the last ``def name(`` in ``lines``."""
    return max(i for i, text in enumerate(lines, 1) if text.lstrip().startswith(f"def {name}("))


MARKERS = """
import torch
import wanscope

x = torch.randn(64, 64)
for i in range(5):
    with wanscope.step():
        y = x @ x
    z = x + 1  # between steps: outside them
"""


def test_marker_steps(tmp_path):
    r, out, _ = profile(tmp_path, MARKERS, hide=False)
    assert r.returncode == 0, r.stderr
    doc = report(out)
    assert (doc["run"]["step_rule"], [s["step"] for s in doc["steps"]]) == ("marker", [1, 2, 3])
    events = ranges(out)
    steps = [e for e in events if e["name"].startswith("wanscope/step#")]
    for step in steps:
        assert [e["name"] for e in events if inside(e, step) and e["name"] in ("aten::matmul", "aten::add")] == [
            "aten::matmul"
        ]


RECORD_FUNCTION = """
import torch
from torch.autograd.profiler import record_function

x = torch.randn(64, 64)
for i in range(5):
    with record_function(f"wanscope/step#{i}"):
        y = x @ x
"""


def test_the_programs_own_step_ranges_are_markers(tmp_path):
    r, out, _ = profile(tmp_path, RECORD_FUNCTION)
    assert r.returncode == 0, r.stderr
    doc = report(out)
    assert (doc["run"]["step_rule"], [s["step"] for s in doc["steps"]]) == ("marker", [1, 2, 3])


NO_STEPS = """
import torch

x = torch.randn(32, 32)
for i in range(3):
    x = x @ x / 32
"""


def test_a_program_without_steps_is_one_window(tmp_path):
    r, out, _ = profile(tmp_path, NO_STEPS)
    assert r.returncode == 0, r.stderr
    doc = report(out)
    assert (doc["run"]["step_rule"], doc["run"]["profiled_steps"], doc["steps"]) == ("none", [], [])
    assert (
        "No step found by the rules tried (marker, diffusers, optimizer): the whole run, from the import "
        "of torch to the end, is one window." in doc["notes"]
    )
    assert sum(e["name"] == "aten::mm" for e in ranges(out)) == 3


# Labels each op with the monotonic clock (T0: the program's start, before torch's import), for
# 2.5 s after torch's import and at least until T0 + 5 s.
TIMED = """
import time
T0 = time.monotonic()
import torch

print("T0", T0, flush=True)
x = torch.randn(16, 16)
end = max(T0 + 5.0, time.monotonic() + 2.5)
while (now := time.monotonic()) < end:
    with torch.profiler.record_function(f"at {now:.6f}"):
        x = torch.tanh(x @ x)
    time.sleep(0.002)  # a few hundred ops in the window, not tens of thousands
"""


def test_step_rule_none_profiles_the_time_window(tmp_path):
    r, out, _ = profile(tmp_path, TIMED, "--step-rule", "none", "--delay", "2.5", "--duration", "0.5")
    assert r.returncode == 0, r.stderr
    t0 = float(r.stdout.split()[1])
    run = report(out)["run"]
    assert (run["step_rule"], run["time_window"]) == ("none", {"delay_s": 2.5, "duration_s": 0.5})
    assert "--step-rule none: the time window from 2.5 s after the program started, for 0.5 s." in report(out)["notes"]
    seen = sorted(float(e["name"][3:]) - t0 for e in ranges(out) if e["name"].startswith("at "))
    # the window opens 2.5 s after the bootstrap started (a little before T0) and lasts 0.5 s, its
    # ends brought to the main thread between two ops; the program ran on 1 s and more after it
    assert len(seen) > 10 and seen[0] >= 2.4 and seen[-1] - seen[0] <= 1.0, (seen[0], seen[-1])


OWN_PROFILER = """
import torch

with torch.profiler.profile() as prof:
    torch.randn(4, 4) @ torch.randn(4, 4)
"""


@pytest.mark.parametrize(
    "args, command, message",
    [
        ([], ["no-such-program-xyz"], "no-such-program-xyz: no such command"),
        ([], ["/bin/ls"], "/bin/ls: not a Python program"),
        ([], [sys.executable, "missing.py"], f"{sys.executable}: missing.py: no such script"),
        (["--preset", "tiny"], None, "--preset: an option of our engine's run, not of a COMMAND's; drop it"),
        (["--compile"], None, "--compile: an option of our engine's run"),
        (["--warmup", "0"], None, "--warmup must be >= 1 with a COMMAND"),
        (["--ncu", "attn("], None, "--ncu 'attn(': not a regular expression (missing ), unterminated subpattern"),
        (["--delay", "1"], None, "--delay sets the time window of --step-rule none; add --step-rule none"),
        (["--step-rule", "none", "--duration", "0"], None, "--duration must be a number of seconds > 0 and at most"),
        (
            ["--step-rule", "none", "--delay", "-1"],
            None,
            "--delay must be a number of seconds >= 0 and at most 1e+07, got -1",
        ),
        (
            ["--step-rule", "none", "--delay", "nan"],
            None,
            "--delay must be a number of seconds >= 0 and at most 1e+07, got nan",
        ),
        (
            ["--step-rule", "none", "--duration", "1e308"],
            None,
            "--duration must be a number of seconds > 0 and at most 1e+07",
        ),
    ],
)
def test_refusals_before_anything_runs(tmp_path, args, command, message):
    argv = ["profile", "--out", tmp_path / "out", *args, "--"]
    r = run_main(*argv, *(command or [sys.executable, "-c", "import sys; open('ran', 'w')"]), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith(f"wanscope: error: {message}") and r.stderr.count("\n") == 1, (
        r.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_a_program_with_its_own_profiler_is_refused(tmp_path):
    r, out, _ = profile(tmp_path, OWN_PROFILER)
    assert r.returncode == 2
    assert r.stderr.endswith(
        "starts torch.profiler itself, and a process takes one profiler: run it without wanscope and "
        "`wanscope analyze` the trace it writes\n"
    )
    assert not (out / "report.json").exists()


@pytest.mark.parametrize("option", [["--step-rule", "optimizer"], ["--delay", "1"], ["--duration", "1"]])
def test_command_options_without_a_command_are_refused(tmp_path, option):
    r = run_main("profile", *option, cwd=tmp_path)
    assert (r.returncode, r.stderr) == (
        2,
        f"wanscope: error: {option[0]} applies to a COMMAND (wanscope profile [OPTIONS] -- COMMAND)\n",
    )
    assert list(tmp_path.iterdir()) == []


DDP = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(5):
    model(torch.randn(8, 16)).square().mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


def test_torchrun_ranks_each_write_a_trace(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    out = tmp_path / "out"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "profile", "--out", str(out), "--", *torchrun, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = report(out)
    assert [s["rank"] for s in doc["sources"]] == [0, 1] and doc["run"]["step_rule"] == "optimizer"
    assert sorted({(s["rank"], s["step"]) for s in doc["steps"]}) == [(r, s) for r in (0, 1) for s in (1, 2, 3)]
    assert "ranks" in doc
    assert sorted(p.name for p in out.iterdir()) == [
        "report.html",
        "report.json",
        "trace-rank0.json.gz",
        "trace-rank1.json.gz",
    ]


def test_wanscope_step_outside_profile_is_a_range_of_any_trace(tmp_path):
    """The marker API with the program's own torch.profiler: its steps are wanscope/step#k."""
    import wanscope

    x = torch.randn(16, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with wanscope.step():
                x @ x
        wanscope.step()
        x + x
    from wanscope.profile.marker import _end_range

    _end_range()
    names = [e.name for e in prof.events() if e.name.startswith("wanscope/step#")]
    assert names[:3] == ["wanscope/step#0", "wanscope/step#1", "wanscope/step#2"] and len(names) == 4


def test_import_wanscope_loads_neither_torch_nor_duckdb():
    code = "import sys, wanscope; wanscope.step; print(sorted(m for m in ('torch', 'duckdb') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr


@pytest.mark.parametrize(
    "tool, message", [("--nsys", "nsys (Nsight Systems) not found"), ("--ncu=attn", "ncu (Nsight Compute) not found")]
)
def test_a_missing_nsight_tool_is_one_line_before_anything_runs(tmp_path, tool, message):
    env = {k: v for k, v in os.environ.items() if k not in ("NSYS", "NCU")}
    env["PATH"] = os.path.dirname(sys.executable)  # no Nsight tool on it
    argv = [sys.executable, "-m", "wanscope", "profile", "--out", "out", tool, "--"]
    argv += [sys.executable, "-c", "open('ran', 'w')"]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 2 and r.stderr.startswith(f"wanscope: error: {message}") and r.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_the_nsight_runs_ask_the_bootstrap_for_cuda_profiler_calls(tmp_path):
    """What --nsys and --ncu hand to the tools: the bootstrap's settings and ncu's start at the
    program's cudaProfilerStart, kernel names matched demangled."""
    from wanscope.ncu.capture import ncu_command
    from wanscope.profile.command import BOOTSTRAP, Window, child_env

    env = child_env(tmp_path, Window(2, 1, "diffusers"), tool="cuda_profiler")
    settings = json.loads(env["WANSCOPE_PROFILE"])
    assert (settings["tool"], settings["warmup"], settings["profile_steps"], settings["step_rule"]) == (
        "cuda_profiler",
        2,
        1,
        "diffusers",
    )
    assert env["WANSCOPE_PROFILE_TOP"] == "1" and env["PYTHONPATH"].split(os.pathsep)[0] == str(BOOTSTRAP)
    args = ncu_command("ncu", ["python", "x.py"], tmp_path / "kernel", "attn_fwd", 0, 1, from_profiler_start=True)
    text = " ".join(args)
    assert "--profile-from-start off --kernel-name-base demangled --kernel-name regex:attn_fwd" in text
    assert args[-2:] == ["python", "x.py"] and "--profile-from-start" not in " ".join(ncu_command("ncu", [], tmp_path))


# Stands in for nsys and ncu: a Python (ncu runs one of its own, which loads our bootstrap too)
# that runs the program as its child, then "exports" a real Nsight Systems capture (the H200
# fixture) under the name it was given.
FAKE_NSYS = """#!{python}
import shutil, subprocess, sys
args = sys.argv[1:]
stem = args[args.index("-o") + 1]
code = subprocess.run(args[args.index("-o") + 2 :]).returncode
if code:
    sys.exit(code)
shutil.copy({fixture!r}, stem + ".sqlite")
open(stem + ".nsys-rep", "w").close()
"""


def test_under_nsys_the_program_is_still_the_profiled_process(tmp_path):
    """nsys and ncu start the program as their child, not ours, and ncu runs a Python of its own
    first: the bootstrap must still hook the program."""
    fake = tmp_path / "nsys"
    fixture = str(Path(__file__).parents[1] / "data" / "h200_wan21_1p3b_triton_step1.sqlite")
    fake.write_text(FAKE_NSYS.format(python=sys.executable, fixture=fixture))
    fake.chmod(0o755)
    r, out, _ = profile(tmp_path, TRAIN, "--nsys", env={"NSYS": str(fake)})
    assert r.returncode == 0, r.stderr
    run = report(out)["run"]
    assert (run["capture"], run["step_rule"], run["steps_seen"], run["profiled_steps"]) == (
        "nsys",
        "optimizer",
        6,
        [1, 2, 3],
    )
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "trace.nsys-rep", "trace.sqlite"]


FOREVER = """
import time
import torch

model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(1_000_000):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    if i == 3:
        print("in the window", flush=True)
    time.sleep(0.01)
"""


def test_ctrl_c_stops_the_program_and_leaves_no_half_written_file(tmp_path):
    import signal

    script = tmp_path / "prog.py"
    script.write_text(FOREVER)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "wanscope", "profile", "--out", str(out), "--profile-steps", "100000"]
    proc = subprocess.Popen(
        [*argv, "--", sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    try:
        for line in proc.stdout:
            if line == "in the window\n":
                proc.send_signal(signal.SIGINT)  # to wanscope alone: it passes it on to the program
                break
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        proc.kill()  # a no-op after a clean exit; else no endless program left behind
    assert proc.returncode == 130 and err.splitlines()[-1] == "wanscope: interrupted", err
    left = sorted(p.name for p in out.iterdir())
    assert left in ([], ["trace.json.gz"]), left  # the program's window, written whole at its exit
    if left:
        with gzip.open(out / "trace.json.gz") as f:
            assert any(e["name"] == "wanscope/step#1" for e in json.load(f)["traceEvents"] if e.get("ph") == "X")


@pytest.mark.parametrize(
    "program, args, why",
    [
        ("print('no torch here')", [], "it never imported torch (in its main thread)"),
        ("import torch", ["--step-rule", "none", "--delay", "30"], "it ended before --delay 30 s"),
    ],
)
def test_a_run_without_a_trace_says_why(tmp_path, program, args, why):
    r, out, script = profile(tmp_path, program, *args, hide=False)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == f"wanscope: error: {sys.executable} left no trace to analyze: {why}"
    assert not (out / "report.json").exists()
