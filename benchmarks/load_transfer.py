"""Each model of a checkpoint loaded through the pinned staging of ``wan/transfer.py`` against
the plain per-tensor ``.to(device)`` it replaced, in one process (issues 25, 26).

Per model (text encoder, DiT, VAE, as ``Components`` loads them for ``generate``): four loads,
plain, staged, plain, staged (the first pays the page cache's and CUDA's warm-up), each timed
with the device synchronized; the first two loads' tensors compared bit for bit. The checkpoint
is ``write_checkpoint.py``'s folder of the real sizes (random values), in the page cache.

    python benchmarks/write_checkpoint.py --layout official --out /tmp/ck
    python benchmarks/load_transfer.py --checkpoint /tmp/ck --out benchmarks/results
    python benchmarks/load_transfer.py --checkpoint /tmp/tiny --preset tiny --device cpu --out /tmp/r
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import torch
from _common import sync, write_result

import wanscope.wan.weights as weights
from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import Components

ORDER = ("plain", "staged", "plain", "staged")


def plain(tensors, dtypes, device):
    """What ``assign_state_dict`` did before ``transfer.to_device``."""
    return [t.to(device=device, dtype=d) for t, d in zip(tensors, dtypes, strict=True)]


def measure(parts: Components, name: str, copies: dict, device: torch.device) -> dict:
    """One model's loads in ``ORDER`` (s, device synchronized), its tensor count and bytes, and
    whether the first plain and staged loads are bit-equal."""
    times: dict[str, list[float]] = {"plain": [], "staged": []}
    first: dict[str, dict[str, torch.Tensor]] = {}
    for how in ORDER:
        weights.to_device = copies[how]
        sync(device)
        t = time.perf_counter()
        model = getattr(parts, name)()
        sync(device)
        times[how].append(round(time.perf_counter() - t, 4))
        if how not in first:
            module = getattr(model, "model", model)  # a TextEncoder holds its module
            first[how] = {k: v.detach().clone() for k, v in module.state_dict().items()}
        del model
    a, b = first["plain"], first["staged"]
    result = {
        "load_s": times,
        "tensors": len(a),
        "bytes": sum(v.numel() * v.element_size() for v in a.values()),
        "bit_equal": a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a),
    }
    del a, b, first
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--preset", default="wan2.1-t2v-1.3b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--label")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    device = torch.device(args.device)
    parts = Components(config=get_preset(args.preset), device=device, dtype=torch.bfloat16, checkpoint=args.checkpoint)
    copies = {"plain": plain, "staged": weights.to_device}
    models = {}
    try:
        for name in ("text_encoder", "dit", "vae"):
            models[name] = measure(parts, name, copies, device)
            print(name, models[name], flush=True)
    finally:
        weights.to_device = copies["staged"]
    result = {
        "benchmark": "load_transfer",
        "date": datetime.date.today().isoformat(),
        "weights": f"{args.checkpoint} (write_checkpoint.py: RANDOM values, real sizes)",
        "preset": args.preset,
        "order": list(ORDER),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "torch": torch.__version__,
        "models": models,
    }
    print(write_result(args.out, "load_transfer", result, args.label))


if __name__ == "__main__":
    main()
