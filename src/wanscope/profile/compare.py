"""``wanscope profile --compare-compile``: the same steps eager and with regional torch.compile,
then ``wanscope diff`` of the two traces.

Both runs go through the whole profile (each writes its trace and reports into ``eager/`` and
``compiled/`` under the output folder); the diff goes to ``diff.json`` and ``diff.html``.
Compilation happens in the compiled run's warm-up steps, so it never lands in the profiled
steps; its cost is reported apart from step time as the two runs' warm-up wall times.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from wanscope.errors import UsageError
from wanscope.profile.kineto import profile_here
from wanscope.profile.options import ProfileOptions
from wanscope.profile.result import build_report, title
from wanscope.report.units import fmt_ns

RUNS = (("eager", False), ("compiled", True))


def check(opts: ProfileOptions) -> None:
    """Raises UsageError when the comparison cannot keep compilation out of the profiled steps."""
    if opts.warmup < 1:
        raise UsageError("--compare-compile needs --warmup >= 1: compilation would land in the profiled steps")


def compare_compile(opts: ProfileOptions, out_dir: Path, console: Console | None = None) -> tuple[dict, list[Path]]:
    """Profile eager and compiled, diff them, write ``diff.json`` and ``diff.html``.

    Returns:
        (the diff dict with a ``compile`` object added, the files written). ``compile``:
        ``warmup_steps``, ``warmup_wall_ns`` {``eager``, ``compiled``} (host wall time of the
        warm-up steps; the compiled one includes compilation), ``mean_step_cpu_ns`` {``eager``,
        ``compiled``} (mean CPU range of the profiled steps: the host's view, the step time on a
        CPU run) and ``reports`` {label: folder}.
    """
    from wanscope.analysis.diff import diff
    from wanscope.clitools import console as make_console
    from wanscope.clitools import dumps_json
    from wanscope.report.diff_html import render_diff_html
    from wanscope.report.write import write_atomic
    from wanscope.trace import open_traces

    c = console or make_console(stderr=True)
    traces, runs, mean_cpu, files = {}, {}, {}, []
    for label, compiled in RUNS:
        folder = out_dir / label
        folder.mkdir(parents=True, exist_ok=True)
        c.print(f"[bold]{label} run[/bold]")
        traces[label], runs[label] = profile_here(replace(opts, compile=compiled), folder)
        steps = build_report(traces[label], runs[label], folder)["steps"]
        mean_cpu[label] = sum(st["cpu_dur_ns"] for st in steps) // len(steps) if steps else None
        files += [*traces[label], folder / "report.json", folder / "report.html"]
    result = diff(
        open_traces([str(p) for p in traces["eager"]]),
        open_traces([str(p) for p in traces["compiled"]]),
        str(traces["eager"][0]),
        str(traces["compiled"][0]),
    )
    result["compile"] = {
        "warmup_steps": opts.warmup,
        "warmup_wall_ns": {label: sum(runs[label]["step_wall_ns"][: opts.warmup]) for label, _ in RUNS},
        "mean_step_cpu_ns": mean_cpu,
        "reports": {label: str(out_dir / label) for label, _ in RUNS},
    }
    page = render_diff_html(result, title(runs["compiled"]).replace("wanscope profile:", "eager vs compiled:"))
    write_atomic(out_dir / "diff.json", dumps_json(result))
    write_atomic(out_dir / "diff.html", page)
    return result, [*files, out_dir / "diff.json", out_dir / "diff.html"]


def compile_lines(result: dict) -> list[str]:
    """Compilation cost apart from step time, and the profiled steps' host time."""
    c = result["compile"]
    w, s = c["warmup_wall_ns"], c["mean_step_cpu_ns"]
    steps = f"{c['warmup_steps']} step{'' if c['warmup_steps'] == 1 else 's'}"
    return [
        f"warm-up ({steps}, host wall time): eager {fmt_ns(w['eager'])}, "
        f"compiled {fmt_ns(w['compiled'])} (compilation included)",
        f"profiled steps, mean CPU range: eager {fmt_ns(s['eager'])}, compiled {fmt_ns(s['compiled'])}",
    ]
