"""``wanscope profile -- COMMAND`` on diffusers' ``WanPipeline`` at 1.3B 480p, beside our engine.

Writes the program a user would write (no wanscope import; diffusers' classes with the Wan2.1
1.3B transformer config and diffusers' own random init in bf16, the default Wan VAE, UniPC with
flow shift 3; random prompt embeddings of 512 tokens passed in, so no text encoder;
832x480x81, CFG 5.0, ``--pipeline-steps`` denoising steps, latents out, no decode) and profiles
it three ways: torch.profiler, Nsight Systems (``--nsys``) and Nsight Compute on the first
attention kernel of the first profiled step (``--ncu REGEX``); then ``wanscope profile
--random-weights`` of our engine at the same size. From each report: utilization, the
attention category's share of kernel time, per-step GPU time, the syncs found and, for ncu,
the kernel's verdict. Random weights: timings are real, outputs are not.

    python3 benchmarks/profile_any_program.py --out DIR [--label L]

Needs a CUDA GPU, diffusers, nsys and ncu. The last line printed is machine-readable JSON; the
result goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import result_label, write_result

PROGRAM = """
import sys, time
import torch
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

steps = int(sys.argv[1])
torch.manual_seed(0)
with torch.device("cuda"):
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
        text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", eps=1e-6,
    ).to(torch.bfloat16)
    vae = AutoencoderKLWan()
scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=transformer, vae=vae, scheduler=scheduler)
embeds = torch.randn(1, 512, 4096, device="cuda", dtype=torch.bfloat16)
negative = torch.randn(1, 512, 4096, device="cuda", dtype=torch.bfloat16)
started = time.perf_counter()
pipe(prompt_embeds=embeds, negative_prompt_embeds=negative, height=480, width=832, num_frames=81,
     num_inference_steps=steps, guidance_scale=5.0, output_type="latent")
torch.cuda.synchronize()
print(f"pipeline: {steps} steps in {time.perf_counter() - started:.1f} s")
"""


def wanscope(*args: str, log: Path) -> tuple[int, float]:
    """``python3 -m wanscope ARGS`` with its output in ``log``; (exit status, wall seconds)."""
    started = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, "-m", "wanscope", *args], stdout=f, stderr=subprocess.STDOUT).returncode
    return code, time.perf_counter() - started


def summary(report_path: Path) -> dict:
    """Utilization, attention share, per-step GPU time and syncs of one report.json."""
    doc = json.loads(report_path.read_text())
    dev = doc["devices"][0]
    shares = {c["category"]: c["pct"] for c in dev["categories"] if c["pct"] is not None}
    out = {
        "capture": doc["run"].get("capture"),
        "step_rule": doc["run"].get("step_rule"),
        "utilization_pct": dev["utilization_pct"],
        "attention_pct": shares.get("attention"),
        "categories_pct": shares,
        "kernel_count": dev["kernel_count"],
        "step_gpu_ms": [s["gpu_dur_ns"] / 1e6 for s in doc["steps"] if s["gpu_dur_ns"] is not None],
        "syncs": [{k: s[k] for k in ("api", "op", "frame", "wait_ns")} for s in doc["syncs"]],
        "top_kernels": [(k["name"][:100], round(k["pct"], 2)) for k in dev["top_kernels"][:5]],
    }
    if "ncu" in doc:
        out["ncu"] = [
            {
                k: d.get(k)
                for k in ("name", "verdict", "sm_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct")
            }
            for d in doc["ncu"]["kernels"]
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--pipeline-steps", type=int, default=4)
    ap.add_argument("--ncu-regex", default="sdpa|flash|fmha|attention")
    ap.add_argument("--label", type=result_label)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    program = args.out / "wan_pipeline.py"
    program.write_text(PROGRAM)
    command = ["--", sys.executable, str(program), str(args.pipeline_steps)]
    window = ["--warmup", "1", "--profile-steps", "2"]
    runs = {
        "pipeline_torch_profiler": [*window, "--out", str(args.out / "pipeline"), *command],
        "pipeline_nsys_ncu": [
            *window,
            "--nsys",
            "--ncu",
            args.ncu_regex,
            "--out",
            str(args.out / "pipeline-nsys"),
            *command,
        ],
        "engine_torch_profiler": ["--random-weights", *window, "--out", str(args.out / "engine")],
    }
    result = {"benchmark": "profile_any_program", "date": time.strftime("%Y-%m-%d"), "random_weights": True}
    import torch

    result.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0), runs={})
    for name, argv in runs.items():
        code, wall = wanscope("profile", *argv, log=args.out / f"{name}.log")
        folder = Path(argv[argv.index("--out") + 1])
        entry = {"command": "wanscope profile " + " ".join(argv), "exit_code": code, "wall_s": round(wall, 1)}
        if (folder / "report.json").exists():
            entry.update(summary(folder / "report.json"))
        result["runs"][name] = entry
        print(name, json.dumps(entry)[:600], file=sys.stderr, flush=True)
    path = write_result(REPO / "benchmarks" / "results", "profile_any_program", result, args.label)
    print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
