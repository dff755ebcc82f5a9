"""One rank that sets up a process group (``setup_from_env``, gloo) and then sleeps, as a host
blocked in CUDA behind a hung NCCL kernel would; launched per rank by ``test_failures.py``
with the torchrun environment::

    python setup_worker.py NUM_HEADS TIMEOUT_S HEARTBEAT STAY_RANK0_S STAY_OTHERS_S [BAR]

With HEARTBEAT 1 it keeps the heartbeat of ``parallel/watch.py``. It prints ``ready`` once set
up, stays the given seconds, leaves the context normally and exits 0. With BAR 1 rank 0 draws
a tqdm progress bar while it stays, as ``wanscope generate`` does while it denoises. A ``WanscopeError``
becomes one ``wanscope: error:`` line and exit code 2, as under the CLI; a lost peer ends it
from the heartbeat thread with one line and exit code 2.
"""

from __future__ import annotations

import sys
import time

from wanscope.errors import WanscopeError
from wanscope.parallel import setup_from_env


def main(
    num_heads: int, timeout_s: float, heartbeat: bool, stay_rank0_s: float, stay_others_s: float, bar: bool
) -> None:
    with setup_from_env("ulysses", "cpu", timeout_s, num_heads, heartbeat=heartbeat) as ctx:
        print("ready", file=sys.stderr, flush=True)
        stay_s = stay_rank0_s if ctx.is_main else stay_others_s
        if not (bar and ctx.is_main):
            time.sleep(stay_s)
            return
        from tqdm import tqdm

        ticks = int(stay_s / 0.1)
        with tqdm(total=ticks, unit="step", desc="denoising", file=sys.stderr, mininterval=0) as progress:
            for _ in range(ticks):
                time.sleep(0.1)
                progress.update(1)


if __name__ == "__main__":
    try:
        main(
            int(sys.argv[1]),
            float(sys.argv[2]),
            sys.argv[3] == "1",
            float(sys.argv[4]),
            float(sys.argv[5]),
            sys.argv[6:7] == ["1"],
        )
    except WanscopeError as e:
        print(f"wanscope: error: {e}", file=sys.stderr)
        sys.exit(2)
