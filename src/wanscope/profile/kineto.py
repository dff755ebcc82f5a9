"""One profile run in this process under torch.profiler: the window, the stages, the run object."""

from __future__ import annotations

from pathlib import Path

from wanscope.profile import driver
from wanscope.profile.options import ProfileOptions
from wanscope.profile.run_info import run_object, static_info
from wanscope.profile.window import KinetoWindow

CAPTURE = "torch.profiler"


def profile_here(opts: ProfileOptions, out_dir: Path) -> tuple[list[Path], dict]:
    """Run the stages with the profiled steps traced into ``out_dir``/trace.json.gz.

    Returns:
        ([the trace], the ``run`` object).
    """
    trace = out_dir / "trace.json.gz"
    window = KinetoWindow(trace, opts.warmup, opts.profile_steps, opts.device == "cuda",
                          static_info(opts, CAPTURE))
    m = driver.run(opts, window)
    return [trace], run_object(opts, CAPTURE, m)
