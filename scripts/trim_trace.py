"""Cut a Kineto trace down to one profiled step, for committing as a fixture.

Keeps every metadata event, every host event that overlaps the step's CPU range (enclosing
ranges such as ``<module>`` overlap it and stay, so call stacks stay whole), and the GPU work
launched inside that range: kernels, memory operations and flow events whose correlation id
is that of a runtime or driver call in the range (the host runs ahead of the GPU, so that
work ends after the range does). The step's range comes from ``wanscope analyze``.

    python scripts/trim_trace.py TRACE.json.gz STEP OUT.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from decimal import Decimal

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def step_range_us(path: str, step: int) -> tuple[Decimal, Decimal]:
    """(start, end) of the step's CPU range, in microseconds."""
    (s,) = [s for s in analyze(open_traces([path]))["steps"] if s["step"] == step]
    return Decimal(s["cpu_start_ns"]) / 1000, Decimal(s["cpu_start_ns"] + s["cpu_dur_ns"]) / 1000


def main() -> None:
    src, step, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    lo, hi = step_range_us(src, step)
    with gzip.open(src, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    events = doc["traceEvents"]

    def overlaps(e: dict) -> bool:
        ts = Decimal(str(e["ts"]))
        return ts <= hi and ts + Decimal(str(e.get("dur", 0))) >= lo

    launched = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in LAUNCH_CATS and "ts" in e and lo <= Decimal(str(e["ts"])) <= hi
    }

    def keep(e: dict) -> bool:
        if e.get("ph") in ("M", None) or "ts" not in e:
            return True
        if e.get("cat") in GPU_CATS:
            return e.get("args", {}).get("correlation") in launched
        if e.get("cat") == "ac2g":
            return e.get("id") in launched
        return overlaps(e)

    doc["traceEvents"] = [e for e in events if keep(e)]
    with gzip.open(dst, "wt", compresslevel=9) as f:
        json.dump(doc, f, default=str)
    print(f"kept {len(doc['traceEvents']):,} of {len(events):,} events of step {step} -> {dst}")


if __name__ == "__main__":
    main()
