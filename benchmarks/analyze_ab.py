"""``wanscope analyze`` on the >= 500 MB benchmark trace, this tree against another one's (the
parent commit's, checked out as a worktree), in fresh processes that alternate.

Builds the native-layout trace of ``analyze_bench.py`` (``--trace``: the H200 Wan2.1 trace, or
the H200 capture with steps, user ranges and memory events, repeated to >= 500 MB), then runs ``python -m wanscope analyze --format json FILE`` ``--runs``
times with each tree's ``src`` first on ``PYTHONPATH``, in the order base, this, base, this,
...; reports each side's median wall time and largest peak RSS, and the ratio. Goals: issue
22 within 5%, issue 23 within 10% of the base.

    git worktree add /tmp/base PARENT
    python benchmarks/analyze_ab.py --base-src /tmp/base/src [--trace default|memory] [--runs 3] [--label L]

The last line printed is machine-readable JSON; the result goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import git_commit, result_label, write_result
from analyze_bench import TRACES, build_apart, measure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-src", type=Path, required=True, help="the other tree's src folder")
    ap.add_argument("--trace", choices=sorted(TRACES), default="default", help="the trace repeated (TRACES)")
    ap.add_argument("--copies", type=int, help="default: the trace's own count, for >= 500 MB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--label", type=result_label)
    args = ap.parse_args()
    base_src = args.base_src.resolve()
    with tempfile.TemporaryDirectory(prefix="wanscope-ab-") as tmp:
        native = Path(tmp) / "trace.json"
        size = build_apart(native, None, args.copies or TRACES[args.trace][2], args.trace)  # the native layout
        os.sync()
        runs: dict[str, list[dict]] = {"base": [], "this": []}
        for _ in range(args.runs):
            for side, src in (("base", base_src), ("this", REPO / "src")):
                os.environ["PYTHONPATH"] = str(src)
                runs[side].append(
                    measure([sys.executable, "-m", "wanscope", "analyze", "--format", "json", str(native)])
                )
                print(side, runs[side][-1], flush=True)
    median = {side: statistics.median(r["wall_s"] for r in rs) for side, rs in runs.items()}
    result = {
        "benchmark": "analyze_ab",
        "date": time.strftime("%Y-%m-%d"),
        "base_commit": git_commit(base_src.parent),
        "machine": f"{os.cpu_count()}-core {platform.machine()}",
        "python": platform.python_version(),
        "trace": args.trace,
        "file_mb": round(size / 1e6, 1),
        "command": "python -m wanscope analyze --format json FILE, fresh processes, base and this alternating",
        "walls_s": {side: [r["wall_s"] for r in rs] for side, rs in runs.items()},
        "median_s": median,
        "peak_rss_mb": {side: max(r["peak_rss_mb"] for r in rs) for side, rs in runs.items()},
        "ratio": round(median["this"] / median["base"], 3),
    }
    path = write_result(REPO / "benchmarks" / "results", "analyze_ab", result, args.label)
    print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
