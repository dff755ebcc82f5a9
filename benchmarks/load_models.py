"""How long each model takes to build or load, and the memory it peaks at (issues 25, 26).

In one fresh process per model (so that each pays its own imports, as ``generate`` does), the
text encoder, the DiT and the VAE are built as ``generate --random-weights`` builds them
(``Components``), phase by phase: the imports, the model on the meta device, ``to_empty`` on
the GPU, the initialization. With ``--checkpoint`` each is loaded from it instead
(``Components`` with the checkpoint: reading and assigning the tensors; ``write_checkpoint.py``
writes one of the real sizes with random values). Reported per model:
the phases' wall times (s, device synchronized), PyTorch's peak allocation and the process's
peak RSS (``ru_maxrss``).

    python benchmarks/load_models.py --out benchmarks/results
    python benchmarks/load_models.py --checkpoint /data/wan --out benchmarks/results
    python benchmarks/load_models.py --smoke --out /tmp/r          # tiny preset on the CPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch
phases = {"import_torch": time.perf_counter() - t0}
model, preset, device, checkpoint = sys.argv[1:5]
device = torch.device(device)

def mark(name, start):
    if device.type == "cuda":
        torch.cuda.synchronize()
    phases[name] = round(time.perf_counter() - start, 4)

from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import Components
cfg = get_preset(preset)
t = time.perf_counter()
if model == "text_encoder":
    import wanscope.wan.text_encoder  # noqa: F401
elif model == "vae":
    import wanscope.wan.vae  # noqa: F401
else:
    import wanscope.wan.dit  # noqa: F401
mark("import_library", t)
parts = Components(config=cfg, device=device, dtype=torch.bfloat16, checkpoint=None if checkpoint == "-" else checkpoint)
if checkpoint == "-" and model == "text_encoder":
    from wanscope.wan.umt5 import UMT5Encoder
    t = time.perf_counter()
    with torch.device("meta"):
        m = UMT5Encoder(cfg.text_encoder)
    mark("build_on_meta", t)
    t = time.perf_counter()
    m = m.to(torch.bfloat16).to_empty(device=device)
    mark("to_empty", t)
    t = time.perf_counter()
    m.init_weights()
    mark("init", t)
    del m
t = time.perf_counter()
loaded = {"text_encoder": parts.text_encoder, "dit": parts.dit, "vae": parts.vae}[model]()
mark("whole_load", t)
print(json.dumps({
    "phases_s": phases,
    "peak_allocated_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path)
    p.add_argument("--preset", default="wan2.1-t2v-1.3b")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--label")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _common import write_result

    preset, device = ("tiny", "cpu") if args.smoke else (args.preset, "cuda")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    models = {}
    for model in ("text_encoder", "dit", "vae"):
        cmd = [sys.executable, "-c", CHILD, model, preset, device, str(args.checkpoint or "-")]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{model}: exit {r.returncode}\n{r.stderr[-3000:]}")
        models[model] = json.loads(r.stdout.strip().splitlines()[-1])
        print(model, models[model], flush=True)
    import torch

    result = {
        "benchmark": "load_models",
        "date": datetime.date.today().isoformat(),
        "smoke": args.smoke,
        "weights": str(args.checkpoint) if args.checkpoint else "random (--random-weights)",
        "preset": preset,
        "dtype": "bf16 (the VAE fp32)",
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "models": models,
    }
    print(write_result(args.out, "load_models", result, args.label))


if __name__ == "__main__":
    main()
