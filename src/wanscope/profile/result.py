"""A profile's results: the analysis of its trace, the ``run`` object, report files, terminal.

report.json is the ``analyze`` JSON (its ``host`` section: host time and self time by op) plus
``run`` (``run_info.py``), with notes that say what the run was (random weights) and, on a CPU, which
figures need a GPU. Both report files are written through a temporary name and a rename.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from wanscope.analysis.summary import analyze
from wanscope.clitools import console as make_console
from wanscope.profile.command import command_notes
from wanscope.profile.command import title as command_title
from wanscope.report.tables import DataTable, quoted
from wanscope.report.text import render_analysis
from wanscope.report.units import fmt_ns
from wanscope.report.write import write_report
from wanscope.trace import open_traces
from wanscope.wan.config import CFG_BATCHED_MAX_TOKENS

CPU_NOTE = (
    "CPU run (no CUDA): the per-step host times, the host time by op and the syncs a GPU would "
    "have (would_sync) are measured here; GPU utilization, kernel times and categories, idle gaps "
    "and the call stacks behind them, per-step GPU time, real sync waits and peak memory per stage "
    "need a CUDA GPU."
)
PROFILER_SYNC_NOTE = (
    "The cudaDeviceSynchronize after the last profiled step is the profiler's own: it waits for "
    "the GPU before closing the capture. Syncs inside a step range are the engine's."
)
KERNELS_CPU_NOTE = (
    "--kernels triton on the CPU: the fused ops (wanscope::norm_modulate, ...) ran as their torch "
    "references (the same math in fp32), not as Triton kernels; TRITON_INTERPRET=1 runs the kernels "
    "in Triton's interpreter, a CUDA GPU runs them for real."
)


def title(run: dict) -> str:
    """``wanscope profile: <preset> WxHxF, steps a-b of N[, RANDOM WEIGHTS]``, or for a COMMAND's
    run ``wanscope profile: <command>, steps a-b (<rule> rule)``."""
    if "command" in run:
        return command_title(run)
    steps = run["profiled_steps"]
    text = (
        f"wanscope profile: {run['preset']} {run['width']}x{run['height']}x{run['frames']}, "
        f"steps {steps[0]}-{steps[-1]} of {run['schedule_steps']}"
    )
    return text + (", RANDOM WEIGHTS" if run["random_weights"] else "")


def cfg_note(run: dict) -> str:
    """Which CFG mode ran and why (``--cfg``, or the auto rule on the run's token count)."""
    mode, tokens = run["cfg"], run["tokens"]
    if (run.get("parallel") or {}).get("cfg_degree", 1) > 1:
        what, why = "cond and uncond on ranks of their own, one B=1 forward each per step", "CFG parallel"
    else:
        what = {
            "sequential": "cond and uncond as two B=1 DiT forwards per step",
            "batched": "cond and uncond as one B=2 DiT forward per step",
        }[mode]
        rule = "<=" if tokens <= CFG_BATCHED_MAX_TOKENS else ">"
        why = f"L = {tokens:,} tokens {rule} {CFG_BATCHED_MAX_TOKENS:,}: batched up to it, sequential above"
    return f"CFG {mode}: {what} ({'--cfg auto, ' + why if run['cfg_auto'] else '--cfg ' + mode})."


def notes(run: dict) -> list[str]:
    if "command" in run:
        return command_notes(run) + ([] if run["device"] == "cuda" else [CPU_NOTE])
    out = [run["note"]] if run["note"] else []
    out.append(PROFILER_SYNC_NOTE if run["device"] == "cuda" else CPU_NOTE)
    if run.get("mode") == "fast":
        out.append(f"Fast mode, not exact (FP8 GEMMs, INT8 Q K^T where our Hopper kernel runs): {run['fast']}.")
    if run["kernels"] == "triton" and run["device"] == "cpu":
        from wanscope.kernels._dispatch import INTERPRET

        if not INTERPRET:
            out.append(KERNELS_CPU_NOTE)
    out.append(cfg_note(run))
    return out


def build_report(traces: list[Path], run: dict, out_dir: Path, memory: dict | None = None) -> dict:
    """Analyze ``traces``, add ``run`` (and ``memory_snapshot``: ``wanscope memory``'s document of
    the run's allocator snapshot, where there is one), write report.json and report.html."""
    con = open_traces([str(t) for t in traces])
    result = analyze(con)
    ours = notes(run)  # analyze already repeats the run's note, read back from the trace
    result["notes"] = ours + [n for n in result["notes"] if n not in ours]
    result["run"] = run
    if memory is not None:
        result["memory_snapshot"] = memory
    write_report(con, result, out_dir, title(run))
    return result


def _bytes(n) -> str:
    return "-" if n is None else f"{n / 2**30:,.2f} GiB"


def render(result: dict, files: list[Path], console: Console | None = None, memory: dict | None = None) -> None:
    """The analysis summary (with the host time by op), the run's stages, ``wanscope memory`` of
    its allocator snapshot (``memory``, where there is one) and the files written."""
    c = console or make_console()
    run = result["run"]
    render_analysis(result, c)
    if "stage_wall_ns" in run:  # our engine's run (a COMMAND's has no stages)
        t = DataTable("stage", "wall time", "peak memory", title="stages")
        for stage, wall in run["stage_wall_ns"].items():
            t.add_row(stage, fmt_ns(wall), _bytes(run["peak_memory_bytes"].get(stage)))
        c.print(t)
    if memory is not None:
        from wanscope.memory.text import render_memory

        render_memory(memory, c)
    c.print(f"[bold]{quoted(title(run))}[/bold]")
    if run["note"]:
        c.print(f"[bold yellow]{quoted(run['note'])}[/bold yellow]")
    c.print("wrote " + quoted(", ".join(str(f) for f in files)))
