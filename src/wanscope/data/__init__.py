"""Package data: the embedded default trace.

``h200_diffusers_wan21_1p3b_eager_forward.json.gz``: one forward of the Wan2.1 T2V 1.3B
DiT (diffusers 0.42.1, official 1.3B config, random weights, bf16, batch 1, 480x832x81)
on one NVIDIA H200, torch 2.11.0+cu130, captured by this project with torch.profiler
(``record_shapes=True, with_stack=True``).
"""

from importlib import resources
from pathlib import Path

DEFAULT_TRACE_NAME = "h200_diffusers_wan21_1p3b_eager_forward.json.gz"


def default_trace() -> Path:
    """Path of the embedded H200 trace inside the installed package."""
    return Path(str(resources.files("wanscope.data").joinpath(DEFAULT_TRACE_NAME)))
