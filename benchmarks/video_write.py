"""``generate``'s video write (``wan.video.write_outputs``: the MP4, the contact sheet and the
sidecar) at 832x480x81, two source trees in fresh processes that alternate (issue 26).

The frames are synthetic, so that the encoder sees motion and fine detail as in a generated
video: per frame a moving colour gradient plus uniform noise of +-8 levels (seeded). Each run
times one ``write_outputs`` call in a new process with the tree's ``src`` on ``PYTHONPATH``;
medians per tree and their ratio. It is CPU work: the machine's cores decide the result.

    git worktree add /tmp/base PARENT
    python benchmarks/video_write.py --src base=/tmp/base/src --src this=src --out /tmp/r
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import git_commit, result_label, version, write_result

CHILD = """
import json, sys, time
import numpy as np
from pathlib import Path
from wanscope.wan.video import write_outputs
f, h, w = 81, 480, 832
yy, xx = np.mgrid[0:h, 0:w]
frames = np.empty((f, h, w, 3), np.int16)
for i in range(f):
    frames[i, ..., 0] = (xx + 3 * i) % 256
    frames[i, ..., 1] = (yy + 2 * i) % 256
    frames[i, ..., 2] = ((xx + yy) // 2 + i) % 256
frames += np.random.default_rng(0).integers(-8, 8, frames.shape, dtype=np.int16)
frames = np.clip(frames, 0, 255).astype(np.uint8)
started = time.perf_counter()
write_outputs(frames, Path(sys.argv[1]), 16, {"note": None})
print(json.dumps({"write_s": time.perf_counter() - started}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", action="append", required=True, metavar="NAME=PATH", help="a source tree")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--label", type=result_label)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    srcs = [s.split("=", 1) for s in args.src]
    times: dict[str, list[float]] = {name: [] for name, _ in srcs}
    with tempfile.TemporaryDirectory(prefix="video-write-") as tmp:
        for _ in range(args.runs):
            for name, src in srcs:
                env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
                video = Path(tmp) / f"{name}.mp4"
                r = subprocess.run([sys.executable, "-c", CHILD, str(video)], env=env, capture_output=True, text=True)
                if r.returncode:
                    raise SystemExit(f"{name}: write_outputs failed:\n{r.stderr[-2000:]}")
                times[name].append(round(json.loads(r.stdout.splitlines()[-1])["write_s"], 4))
    median = {name: statistics.median(ts) for name, ts in times.items()}
    first = srcs[0][0]
    result = {
        "benchmark": "video_write",
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "frames": [81, 480, 832],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "imageio_ffmpeg": version("imageio_ffmpeg"),
        "srcs": dict(srcs),
        "write_s": times,
        "median_s": median,
        "ratio_to_first": {name: round(m / median[first], 3) for name, m in median.items()},
    }
    print(json.dumps(result["median_s"]), json.dumps(result["ratio_to_first"]))
    print(write_result(args.out, "video_write", result, args.label))


if __name__ == "__main__":
    main()
