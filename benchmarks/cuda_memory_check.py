"""``analyze``'s peak memory against PyTorch's own counter, on a CUDA GPU.

A program holds known tensors under torch.profiler (``profile_memory=True``): with
``torch.cuda.reset_peak_memory_stats()`` at the window's start it allocates three 64 MiB
tensors, holds them at once, frees them, then a smaller pair; ``torch.cuda.max_memory_allocated()``
is read beside the trace. ``wanscope analyze`` of the trace should report the same peak (the
caching allocator rounds a request up to a multiple of 512 bytes, which 64 MiB already is)
and ``aten::empty`` (``torch.empty``'s op) holding the three tensors at the peak; the script
records both and exits 1 where the peaks differ.

    python3 benchmarks/cuda_memory_check.py --out DIR [--label L]

Needs a CUDA GPU. The last line printed is machine-readable JSON; the result goes to
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

import torch
from _common import git_commit, result_label, write_result

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

MIB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--label", type=result_label)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trace = args.out / "cuda_memory.json"
    torch.ones(1, device="cuda")  # the context and allocator exist before the window
    before = torch.cuda.memory_allocated()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=True) as prof:
        torch.cuda.reset_peak_memory_stats()
        held = [torch.empty(16 * MIB, device="cuda") for _ in range(3)]  # 3 x 64 MiB of float32
        torch.cuda.synchronize()
        del held
        pair = [torch.empty(4 * MIB, device="cuda") for _ in range(2)]  # 2 x 16 MiB
        del pair
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    prof.export_chrome_trace(str(trace))
    result = analyze(open_traces([str(trace)]))
    gpu = [m for m in result["memory"] if m["device"] == 0]
    m = gpu[0] if gpu else None
    out = {
        "benchmark": "cuda_memory_check",
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(REPO),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "allocated_before_bytes": before,
        "max_memory_allocated_bytes": peak,
        "analyze_peak_allocated_bytes": m and m["peak_allocated_bytes"],
        "analyze_peak_reserved_bytes": m and m["peak_reserved_bytes"],
        "analyze_at_peak": m and m["at_peak"],
        "equal": bool(m and m["peak_allocated_bytes"] == peak),
        "held_over_before_bytes": m and m["peak_allocated_bytes"] - before,
    }
    path = write_result(REPO / "benchmarks" / "results", "cuda_memory_check", out, args.label)
    print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(out))
    if not out["equal"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
