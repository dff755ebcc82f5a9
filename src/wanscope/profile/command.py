"""``wanscope profile -- COMMAND``: profile anyone's PyTorch program, with no change to its code.

The program runs unmodified in a child process with its stdin, stdout, stderr, argv, cwd and
environment, but for three variables of ours: ``WANSCOPE_PROFILE`` (the settings),
``WANSCOPE_PROFILE_TOP`` (which the program's own process takes out of its environment) and our
bootstrap folder first on ``PYTHONPATH`` (``bootstrap/sitecustomize.py``, which chains to any
``sitecustomize`` it shadows, and ``bootstrap/_wanscope_boot.py``, which finds the steps and runs
torch.profiler around the profiled ones). The bootstrap imports only the standard library and
torch, so the program's Python needs torch, not wanscope. This process needs no torch.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from wanscope.errors import InputError, UsageError

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"
STEP_RULES = ("auto", "marker", "diffusers", "optimizer", "none")
AUTO_ORDER = ("marker", "diffusers", "optimizer")
OWN_PROFILER = "own_profiler"  # _wanscope_boot.OWN_PROFILER
INTERRUPT_GRACE_S = 10  # seconds a program gets to end after a Ctrl-C before it is killed
TOP = "WANSCOPE_PROFILE_TOP"  # _wanscope_boot.TOP: the first process to import torch with it is the program
# Options of the engine run that mean nothing for someone else's program.
ENGINE_ONLY = (
    "preset",
    "checkpoint",
    "random_weights",
    "size",
    "frames",
    "steps",
    "compile_",
    "compare_compile",
    "parallel",
    "mode",
    "fast_spec",
    "legacy_step_lookup",
    "cfg",
    "attention",
    "kernels",
    "memory_budget",
    "dist_timeout",
    "child",
    "run_info",
)


@dataclass(frozen=True)
class Window:
    """What to profile of the program: steps ``warmup`` .. ``warmup + profile_steps - 1`` as
    ``step_rule`` finds them, or with ``step_rule`` ``none`` the whole run or, with ``delay``, the
    time window from ``delay`` seconds after its start for ``duration`` seconds (to its end where
    None); ``memory``: PyTorch's memory events too; ``memory_history``: the CUDA allocator's
    history, from the program's CUDA start-up to its exit, dumped as ``memory_snapshot.pickle``."""

    warmup: int
    profile_steps: int
    step_rule: str
    memory: bool = False
    delay: float | None = None
    duration: float | None = None
    memory_history: bool = False

    @property
    def start_s(self) -> float | None:
        """Where the time window starts (``--duration`` alone: at 0), None without one."""
        return None if self.delay is None and self.duration is None else self.delay or 0.0

    def settings(self) -> dict:
        """The bootstrap's settings for this window (``_wanscope_boot`` reads them)."""
        return {
            "warmup": self.warmup,
            "profile_steps": self.profile_steps,
            "step_rule": self.step_rule,
            "memory": self.memory,
            "delay": self.start_s,
            "duration": self.duration,
            "memory_history": self.memory_history,
        }


@dataclass(frozen=True)
class CommandRun:
    """What the child process left: its exit status, each profiled process's record
    (``_wanscope_boot._write_record``: pid, rank, top, step_rule, steps, trace, versions, gpu,
    memory_snapshot), its traces and its allocator snapshots (``--memory-history``)."""

    exit_code: int
    records: list[dict]
    traces: list[Path]
    snapshots: tuple[Path, ...] = ()


def _python_program(argv: list[str]) -> str | None:
    """Why ``argv`` is not a Python program we can profile (None: it is): a Python interpreter
    running a script, ``-m`` or ``-c``, or a script whose ``#!`` line runs Python."""
    exe = shutil.which(argv[0])
    if exe is None:
        return "no such command" if os.sep not in argv[0] else "no such file, or not executable"
    name = os.path.basename(exe)
    if name.startswith("python"):
        rest = [a for a in argv[1:] if not a.startswith("-") or a in ("-m", "-c")]
        if rest and rest[0] not in ("-m", "-c") and not Path(rest[0]).is_file():
            return f"{rest[0]}: no such script"
        return None
    try:
        with open(exe, "rb") as f:
            first = f.readline(256)
    except OSError as e:
        return f"cannot read it ({e.strerror or e})"
    if first.startswith(b"#!") and b"python" in first:
        return None
    return "not a Python program (a Python interpreter with its script, or a script whose #! line runs Python)"


def check_command(argv: list[str], given: list[str], window: Window, ncu: str | None = None) -> None:
    """Refuse, before anything runs, a command we cannot profile or options that do not apply.

    Args:
        given: the engine-only options given on the command line (their ``--`` names).

    Raises:
        UsageError: engine-only options with a command, a step count below 1 (``--warmup`` must be
            >= 1: a program's first step has no start to find), an unknown step rule, a
            ``--delay`` or ``--duration`` without ``--step-rule none`` or not a finite number of
            seconds (``--delay`` >= 0, ``--duration`` > 0), or an ``ncu`` kernel regex that does
            not compile.
        InputError: the command is not found or is not a Python program.
    """
    if given:
        raise UsageError(f"{', '.join(given)}: an option of our engine's run, not of a COMMAND's; drop it")
    if window.step_rule not in STEP_RULES:
        raise UsageError(f"unknown step rule {window.step_rule!r}; known: {', '.join(STEP_RULES)}")
    if window.step_rule != "none" and window.warmup < 1:
        raise UsageError("--warmup must be >= 1 with a COMMAND: the program's first step has no start to find")
    if window.profile_steps < 1:
        raise UsageError(f"--profile-steps must be >= 1, got {window.profile_steps}")
    _check_time_window(window)
    if ncu is not None:
        try:
            re.compile(ncu)
        except re.error as e:
            raise UsageError(f"--ncu {ncu!r}: not a regular expression ({e})") from None
    why = _python_program(argv)
    if why is not None:
        raise InputError(Path(argv[0]), why)


MAX_WINDOW_S = 10**7  # seconds (about 116 days): the timer's sleep takes no more


def _check_time_window(window: Window) -> None:
    for name, value, positive in (("--delay", window.delay, False), ("--duration", window.duration, True)):
        if value is None:
            continue
        if window.step_rule != "none":
            raise UsageError(f"{name} sets the time window of --step-rule none; add --step-rule none")
        if not math.isfinite(value) or value < 0 or (positive and value == 0) or value > MAX_WINDOW_S:
            bound = "> 0" if positive else ">= 0"
            raise UsageError(f"{name} must be a number of seconds {bound} and at most {MAX_WINDOW_S:g}, got {value:g}")


def child_env(out_dir: Path, window: Window, tool: str = "torch.profiler") -> dict[str, str]:
    """The program's environment: ours plus the three variables of the bootstrap. ``tool``:
    ``torch.profiler``, or ``cuda_profiler`` (under Nsight Systems and Nsight Compute)."""
    env = dict(os.environ)
    settings = {"tool": tool, "out": str(out_dir.resolve()), **window.settings()}
    env["WANSCOPE_PROFILE"] = json.dumps(settings)
    env[TOP] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP), env.get("PYTHONPATH")) if p)
    return env


def _collect(out_dir: Path) -> list[dict]:
    """The per-process records the bootstrap left; then they and any half-written file go."""
    records = []
    for path in sorted(out_dir.glob(".boot-*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    _remove_partials(out_dir)
    return records


def _snapshots(out_dir: Path) -> tuple[Path, ...]:
    """The allocator snapshots the bootstrap wrote (``memory_snapshot.pickle``, or one per rank)."""
    return tuple(sorted(out_dir.glob("memory_snapshot*.pickle")))


def _remove_stale(out_dir: Path) -> None:
    """Traces and snapshots of an earlier run: not this run's."""
    for stale in [out_dir / "trace.json.gz", *out_dir.glob("trace-rank*.json.gz"), *_snapshots(out_dir)]:
        stale.unlink(missing_ok=True)


def _remove_partials(out_dir: Path) -> None:
    for path in out_dir.glob(".partial-*"):
        path.unlink(missing_ok=True)
    for path in out_dir.glob(".boot-*.json*"):
        path.unlink(missing_ok=True)


def run_command(argv: list[str], out_dir: Path, window: Window):
    """Run the program under the bootstrap; returns a ``CommandRun``.

    A Ctrl-C reaches the program too (same process group, and we pass it on): we wait for it to
    end, ``INTERRUPT_GRACE_S`` at most (or until a second Ctrl-C) before we kill it, remove what
    is half-written, and raise KeyboardInterrupt.
    """
    env = child_env(out_dir, window)
    _remove_stale(out_dir)
    proc = subprocess.Popen(argv, env=env)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=INTERRUPT_GRACE_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):  # it hangs, or a second Ctrl-C
            proc.kill()
            proc.wait()
        _remove_partials(out_dir)
        raise
    records = _collect(out_dir)
    traces = sorted(out_dir.glob("trace-rank*.json.gz")) or [p for p in [out_dir / "trace.json.gz"] if p.exists()]
    return CommandRun(exit_code=code, records=records, traces=traces, snapshots=_snapshots(out_dir))


def run_object(argv: list[str], result: CommandRun, window: Window, capture: str) -> dict:
    """The report's ``run`` object for a command (``docs/json.md``, "profile JSON")."""
    profiled = [r for r in result.records if r.get("trace")] or result.records
    first = profiled[0] if profiled else {}
    found = first.get("step_rule")
    timed = window.start_s is not None
    return {
        "command": argv,
        "cwd": os.getcwd(),
        "step_rule": found or "none",
        "step_rule_asked": window.step_rule,
        "rules_tried": list(AUTO_ORDER) if window.step_rule == "auto" else [window.step_rule],
        "time_window": {"delay_s": window.start_s, "duration_s": window.duration} if timed else None,
        "exit_code": result.exit_code,
        "capture": capture,
        "warmup_steps": window.warmup if found else 0,
        "profiled_steps": list(range(window.warmup, window.warmup + window.profile_steps)) if found else [],
        "steps_seen": first.get("steps", 0),
        "versions": {"python": first.get("python"), "torch": first.get("torch"), "cuda": first.get("cuda")},
        "gpu": {"name": first["gpu"]} if first.get("gpu") else None,
        "device": "cuda" if first.get("gpu") else "cpu",
        "note": None,
        "random_weights": False,
    }


def no_trace_reason(result: CommandRun, window: Window, status: int) -> str:
    """Why a run left no trace: its exit status, the end of the program before the time
    window, a trace that could not be written (the bootstrap's record says torch was
    imported), or no import of torch at all (no record)."""
    if status:
        return f"it exited with status {status}"
    if not any(r.get("torch") for r in result.records):
        return "it never imported torch (in its main thread)"
    if window.start_s:
        return f"it ended before --delay {window.start_s:g} s"
    return "the trace could not be written (see the messages above)"


def command_notes(run: dict) -> list[str]:
    """What the report says of a command's run: which rule found the steps, or that none did."""
    out = []
    if run["step_rule"] == "none":
        timed = run["time_window"]
        if timed:
            length = "to the end" if timed["duration_s"] is None else f"for {timed['duration_s']:g} s"
            out.append(
                f"--step-rule none: the time window from {timed['delay_s']:g} s after the program started, {length}."
            )
        elif run["step_rule_asked"] == "none":
            out.append("--step-rule none: the whole run, from the import of torch to the end, is one window.")
        else:
            out.append(
                f"No step found by the rules tried ({', '.join(run['rules_tried'])}): the whole run, from the "
                "import of torch to the end, is one window."
            )
    else:
        how = {
            "marker": "the program's wanscope.step() markers or wanscope/step#k ranges",
            "diffusers": "diffusers' denoising steps (first transformer call to the end of scheduler.step)",
            "optimizer": "torch.optim.Optimizer.step calls",
        }[run["step_rule"]]
        out.append(f"Steps found by the {run['step_rule']} rule: {how}.")
        seen = run["steps_seen"]
        if seen < run["profiled_steps"][-1] + 1:
            out.append(f"The program ran {seen} steps, fewer than the window's last ({run['profiled_steps'][-1]}).")
    if run["exit_code"] != 0:
        out.append(f"The program exited with status {run['exit_code']}; the trace holds what was captured by then.")
    return out


def title(run: dict) -> str:
    text = " ".join(run["command"])
    if len(text) > 80:
        text = text[:77] + "..."
    steps = run["profiled_steps"]
    if steps:
        where = f"steps {steps[0]}-{steps[-1]} ({run['step_rule']} rule)"
    else:
        where = "a time window" if run["time_window"] else "the whole run"
    return f"wanscope profile: {text}, {where}"


def own_profiler_error(argv: list[str]) -> UsageError:
    return UsageError(
        f"{argv[0]} starts torch.profiler itself, and a process takes one profiler: run it without "
        "wanscope and `wanscope analyze` the trace it writes"
    )


def exit_status(code: int) -> int:
    """Our exit status for the child's: its code, or 128 + the signal that ended it."""
    return 128 - code if code < 0 else code


def nsys_run(nsys_exe: str, argv: list[str], out_dir: Path, window: Window):
    """The program under Nsight Systems (``--capture-range=cudaProfilerApi``: the bootstrap calls
    cudaProfilerStart/Stop around the profiled steps); a ``CommandRun`` with the SQLite export."""
    from wanscope.profile import nsys

    env = child_env(out_dir, replace(window, memory=False), tool="cuda_profiler")
    for stale in _snapshots(out_dir):
        stale.unlink()
    try:
        _rep, sqlite = nsys.capture(nsys_exe, out_dir, argv, env=env)
    finally:
        records = _collect(out_dir)
    return CommandRun(exit_code=0, records=records, traces=[sqlite], snapshots=_snapshots(out_dir))


def ncu_run(regex: str, argv: list[str], out_dir: Path, window: Window):
    """The program again, under Nsight Compute from its first profiled step (the bootstrap's
    cudaProfilerStart; ``--profile-from-start off``): the first launch of a kernel whose demangled
    name matches ``regex``. Returns (the files, the diagnoses)."""
    from wanscope.ncu.capture import capture
    from wanscope.profile.ncu import diagnose_capture

    env = child_env(out_dir, replace(window, profile_steps=1, memory=False, memory_history=False), tool="cuda_profiler")
    try:
        files = capture(argv, out_dir / "kernel", regex, 0, 1, from_profiler_start=True, env=env)
    finally:
        _collect(out_dir)
    return files, diagnose_capture(files)
