"""Ingest + analyze speed and memory against Holistic Trace Analysis on a large trace.

Builds a >= 500 MB trace in torch.profiler's own layout by repeating the event blocks of an
H200 trace (``--trace``: the Wan2.1 DiT forward embedded in the package, or a capture with
steps, user ranges and PyTorch's memory events: ``TRACES``) with shifted timestamps, ids and
step numbers, and the same events one per line;
then times, each in a fresh process, ``wanscope analyze --format json`` on both and HTA
(load + temporal, idle-time and kernel breakdowns) on the native file, reporting wall time
and peak RSS. Goal (issue 2): >= 10x faster than HTA, peak RSS <= 0.5x the file.

    python benchmarks/analyze_bench.py [--trace default|memory] [--copies N] [--workdir DIR] [--skip-hta]

The last line printed is machine-readable JSON.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wanscope.data import default_trace

# Fields shifted per copy so that copies neither overlap in time nor share ids; step numbers
# too, so that each copy's steps are steps of their own.
_FIELD = re.compile(rb'"(ts|External id|correlation|id|Python id|Python parent id|Ev Idx)": (-?\d+)(\.\d+)?')
_STEP = re.compile(rb'"name": "(wanscope/step#|ProfilerStep#)(\d+)"')
STEP_STRIDE = 1000

# The traces repeated: (file, per-copy time shift in us, longer than the trace so that copies
# follow each other, copies for >= 500 MB). "default": the H200 Wan2.1 1.3B DiT forward
# embedded in the package (615 ms, no steps); "memory": the H200 capture of
# memory_trace_program.py under `wanscope profile --memory` (2 steps in 1.35 s: steps, user
# ranges, PyTorch's memory events, Python stacks).
TRACES = {
    "default": (default_trace, 700_000, 50),
    "memory": (
        lambda: Path(__file__).resolve().parents[1] / "tests" / "data" / "h200_wan21_1p3b_memory_steps.json.gz",
        1_500_000,
        15,
    ),
}


def build(out_native: Path, out_lines: Path | None, copies: int, trace: str = "default") -> int:
    """Write both layouts of ``copies`` copies of ``TRACES[trace]`` (the native one alone where
    ``out_lines`` is None); return the size of the native file in bytes."""
    source, span_us, _ = TRACES[trace]
    text = gzip.decompress(source().read_bytes())
    head_end = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    body_end = text.rindex(b"\n  ]")
    header, body, trailer = text[:head_end], text[head_end:body_end], text[body_end:]
    id_step = 10_000_000
    blocks = body.split(b"\n  {")[1:]
    with open(out_native, "wb") as nat, open(out_lines or os.devnull, "wb") as lin:
        nat.write(header)
        lin.write(b'{"traceEvents": [')
        for k in range(copies):

            def shift(m, k=k):
                field, whole, frac = m.group(1), int(m.group(2)), m.group(3) or b""
                delta = k * span_us if field == b"ts" else k * id_step
                return b'"%s": %d%s' % (field, whole + delta, frac)

            shifted = _STEP.sub(
                lambda m, k=k: b'"name": "%s%d"' % (m.group(1), int(m.group(2)) + k * STEP_STRIDE), body
            )
            shifted = _FIELD.sub(shift, shifted)
            if k:
                nat.write(b",")
            nat.write(shifted.rstrip().rstrip(b","))
            if out_lines is None:
                continue
            for i, block in enumerate(shifted.split(b"\n  {")[1:]):
                line = b"{" + re.sub(rb"\s*\n\s*", b" ", block).rstrip().rstrip(b",")
                lin.write((b"\n" if (k == 0 and i == 0) else b",\n") + line)
            assert len(blocks) == i + 1
        nat.write(trailer)
        lin.write(b"\n]}\n")
    return out_native.stat().st_size


def build_apart(out_native: Path, out_lines: Path | None, copies: int, trace: str = "default") -> int:
    """``build`` in a process of its own: the copies' buffers stay out of this process, whose
    size a child's peak RSS would otherwise include (a forked child starts with its parent's
    pages counted)."""
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=build, args=(out_native, out_lines, copies, trace))
    proc.start()
    proc.join()
    if proc.exitcode:
        raise SystemExit(f"building the trace failed (exit code {proc.exitcode})")
    return out_native.stat().st_size


def measure(cmd: list[str]) -> dict:
    """Wall time and peak RSS (MiB, from wait4's rusage of that one child) of a fresh process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"{cmd[:3]} failed: {err.read()[-2000:].decode(errors='replace')}")
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


HTA_SCRIPT = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
print("hta done")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", choices=sorted(TRACES), default="default", help="the trace repeated (TRACES)")
    ap.add_argument("--copies", type=int, help="default: the trace's own count, for >= 500 MB")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each wanscope command (median wall, max RSS)")
    args = ap.parse_args()
    copies = args.copies or TRACES[args.trace][2]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wanscope-bench-"))
    (work / "native").mkdir(parents=True, exist_ok=True)
    native, lines = work / "native" / "rank-0.pt.trace.json", work / "lines.json"
    t0 = time.perf_counter()
    size = build_apart(native, lines, copies, args.trace)
    # Write the ~1 GB just built back to disk before timing: left to the kernel's flusher
    # threads, its writeback ran beside the first timed runs (wanscope's, on 2 cores).
    os.sync()
    print(
        f"built {size / 1e6:.0f} MB native + {lines.stat().st_size / 1e6:.0f} MB one-per-line "
        f"in {time.perf_counter() - t0:.1f} s under {work}",
        flush=True,
    )
    results = {}
    wanscope = [sys.executable, "-m", "wanscope", "analyze", "--format", "json"]
    for name, path in (("wanscope_native", native), ("wanscope_lines", lines)):
        runs = [measure(wanscope + [str(path)]) for _ in range(args.repeats)]
        results[name] = {
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "walls_s": [r["wall_s"] for r in runs],
        }
    if not args.skip_hta:
        results["hta_native"] = measure([sys.executable, "-c", HTA_SCRIPT, str(native.parent)])
    for name, r in results.items():
        print(
            f"{name:18s} wall {r['wall_s']:7.2f} s   peak RSS {r['peak_rss_mb']:8.1f} MB   runs {r.get('walls_s', [r['wall_s']])}"
        )
    summary = {
        "file_mb": round(size / 1e6, 1),
        "trace": args.trace,
        "copies": copies,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **{k: {"wall_s": v["wall_s"], "peak_rss_mb": v["peak_rss_mb"]} for k, v in results.items()},
    }
    if "hta_native" in results:
        summary["speedup_vs_hta"] = round(results["hta_native"]["wall_s"] / results["wanscope_native"]["wall_s"], 1)
    summary["rss_over_file"] = round(results["wanscope_native"]["peak_rss_mb"] * 2**20 / size, 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
