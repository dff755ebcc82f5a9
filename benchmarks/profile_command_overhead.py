"""What ``wanscope profile -- COMMAND`` costs the steps it does not profile.

Writes a launch-bound CPU program (``--steps`` optimizer steps of ``--ops`` small tensor ops
each, no wanscope import) that times its own steps, then runs it ``--runs`` times each, in
interleaved order, plainly and under ``wanscope profile --warmup 1 --profile-steps 3``. The
steps after the profiled window (``--profile-steps + 2`` on) are the ones the profiler must not
slow: their median step time under wanscope against the plain run's, from the medians of each
run. Goal (issue 21): within 5%.

    python benchmarks/profile_command_overhead.py [--steps 20] [--ops 250] [--runs 5] [--label L]

The last line printed is machine-readable JSON; the result goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import result_label, write_result

PROGRAM = """
import json, sys, time
import torch

steps, ops, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
w = torch.nn.Parameter(torch.randn(8, 8))
opt = torch.optim.SGD([w], lr=1e-3)
times = []
for step in range(steps):
    started = time.perf_counter_ns()
    x = torch.randn(8, 8)
    for _ in range(ops):
        x = torch.tanh(x @ w) * 0.5
    x.sum().backward()
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter_ns() - started)
with open(out, "w") as f:
    json.dump(times, f)
"""


def run_once(work: Path, program: Path, steps: int, ops: int, profiled: bool, index: int) -> list[int]:
    times = work / f"times-{'wanscope' if profiled else 'plain'}-{index}.json"
    argv = [sys.executable, str(program), str(steps), str(ops), str(times)]
    if profiled:
        out = work / f"profile-{index}"
        argv = [sys.executable, "-m", "wanscope", "profile", "--out", str(out), "--warmup", "1", "--profile-steps", "3"]
        argv += ["--", sys.executable, str(program), str(steps), str(ops), str(times)]
    subprocess.run(argv, check=True, capture_output=True, cwd=work)
    return json.loads(times.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--ops", type=int, default=250, help="small-tensor op pairs (matmul, tanh) per step")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--label", type=result_label)
    args = ap.parse_args()
    after = 3 + 2  # the steps after warm-up (1) and the profiled ones (3), and one more to settle
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program = work / "program.py"
        program.write_text(PROGRAM)
        medians = {"plain": [], "wanscope": []}
        for i in range(args.runs):  # interleaved: plain, profiled, plain, profiled, ...
            for mode in medians:
                times = run_once(work, program, args.steps, args.ops, mode == "wanscope", i)
                medians[mode].append(statistics.median(times[after:]))
    plain, profiled = statistics.median(medians["plain"]), statistics.median(medians["wanscope"])
    import torch

    result = {
        "benchmark": "profile_command_overhead",
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "steps": args.steps,
        "ops_per_step": 2 * args.ops + 4,
        "runs": args.runs,
        "steps_compared": f"{after}..{args.steps - 1}",
        "median_step_ns": {"plain": plain, "wanscope": profiled},
        "per_run_median_step_ns": medians,
        "ratio": profiled / plain,
        "goal": "ratio <= 1.05",
    }
    path = write_result(REPO / "benchmarks" / "results", "profile_command_overhead", result, args.label)
    print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
