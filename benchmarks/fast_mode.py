"""Issue 9's fast mode on one GPU: speed and error of FP8 GEMMs and INT8/FP8 attention, in one run.

Default: the 1.3B preset at 480x832x81 (L = 32,760 tokens), B=1, on CUDA. Sections, each variant
in its own try/except (a failure is recorded and the run goes on):

1. DiT forward: our exact bf16 path (fused Triton kernels, the DiT's default attention: ``auto``,
   our Hopper kernel on an H200 since f466517, cuDNN before; the row names below still say
   cuDNN from the runs they were written for) against fast-mode
   variants (``wan/precision.py`` ``FastConfig``, written as specs): the sweep in ``VARIANTS``
   below, or each ``--variant SPEC`` given instead. Each: warm-up, then
   the median of ``--repeats`` (>= 5) CUDA-event-timed forwards, and the relative L2 error of
   the output against our fp32 model (TF32 off), its ratio to the bf16 path's error (issue 9:
   <= 5x) and the error it adds in quadrature (``added_error_vs_bf16``), and its time's ratio
   to ``--best-compile-ms`` (diffusers' best compile, measured by
   ``benchmarks/dit_forward.py``; issue 9: <= 0.75x must, <= 0.6x goal).
2. Attention alone at [1, 12, 32760, 128]: cuDNN (SDPA bf16) against ``attention_int8`` (PV in
   e4m3 and in bf16): ms, TFLOP/s (4 B N L^2 D FLOP), relative L2 error against float64 (computed
   on the GPU in query chunks).
3. Per-kernel times: each linear shape of a block in bf16 (``F.linear``) and FP8 (quantize +
   ``_scaled_mm``), the activation quantizer alone (with and without GELU), the q/k INT8 and v
   e4m3 quantizers.

Prints a table and ends with one line of JSON; writes ``OUT/fast_mode-YYYY-MM-DD.json``.
``--smoke`` runs the same code on the tiny preset on the CPU (torch references of the kernels).

    python3 benchmarks/fast_mode.py --out benchmarks/results
    python3 benchmarks/fast_mode.py --out /tmp/fast --skip attention,kernels \
        --variant "linears=qkv,ffn_up int8_attention=no" --variant "linears=ffn int8_attention=no"
    python3 benchmarks/fast_mode.py --smoke --out /tmp/fast
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
import torch.nn.functional as F
from _common import attention_f64, rel_l2, result_label, time_ms, version, write_result

from wanscope.wan.config import get_preset
from wanscope.wan.dit import WanDiT
from wanscope.wan.precision import FastConfig, apply_fast_mode

# The sweep against issue 9's bound (forward error <= 5x the bf16 path's; all FP8 linears gave
# 7.3x in the first fast-mode run, benchmarks/RESULTS.md, 2026-11-30). One FP8 family at a time,
# with cuDNN attention: each family's share of the error and of the time. Then the two families
# whose FP8 GEMM beat bf16 in that run (qkv 0.475 vs 0.611 ms, FFN up 0.861 vs 1.163; FFN down
# lost to its GELU quantizer, o and cross tied), alone, with the two first and last blocks exact,
# and under our INT8 attention; all linears; all linears with INT8 attention and e4m3 P V
# (FastConfig's defaults before 2026-11-30: 983 ms, 17.9x the bf16 error); and FastConfig()'s
# defaults (since bcf27f9: FP8 qkv and both FFN GEMMs with fast accumulation, FFN down's
# quantizer in one pass, and INT8 Q K^T where the attention resolves to our Hopper kernel). Every
# other spec names int8_attention, so those rows do not move with the defaults (they do with
# fast_accum).
# 10 forwards of ~0.5-1 s, each variant's build and warm-up included: ~2 min of the script's < 4.
VARIANTS = [
    ("FP8 qkv", "linears=qkv int8_attention=no"),
    ("FP8 o", "linears=o int8_attention=no"),
    ("FP8 cross q, o", "linears=cross int8_attention=no"),
    ("FP8 FFN up", "linears=ffn_up int8_attention=no"),
    ("FP8 FFN down (GELU in quantizer)", "linears=ffn_down int8_attention=no"),
    ("FP8 qkv + FFN up", "linears=qkv,ffn_up int8_attention=no"),
    ("FP8 qkv + FFN up, blocks 0,1,-2,-1 exact", "linears=qkv,ffn_up int8_attention=no exact_blocks=0,1,-2,-1"),
    ("FP8 all linears", "linears=all int8_attention=no"),
    ("FP8 qkv + FFN up, INT8 attn, bf16 PV", "linears=qkv,ffn_up int8_attention=yes pv_fp8=no"),
    ("FP8 all linears, INT8 attn, e4m3 PV", "linears=all int8_attention=yes pv_fp8=yes"),
    ("FastConfig() defaults", ""),
]


def forward_section(args, device, cfg, shape, text_len):
    """Section 1: rows of {name, ms, times_ms, rel_l2_vs_fp32, ...}."""
    torch.manual_seed(0)
    g = torch.Generator(device=device).manual_seed(1)
    latents = torch.randn(shape, generator=g, device=device)
    timestep = torch.tensor([500.0], device=device)
    context = torch.zeros(1, text_len, cfg.text_dim, device=device)
    context[:, :40] = torch.randn(1, min(40, text_len), cfg.text_dim, generator=g, device=device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with torch.device(device):
        model = WanDiT(cfg).init_weights().eval().requires_grad_(False)
    with torch.no_grad():
        ref = model(latents, timestep, context)
    state = model.state_dict()
    del model
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    def build():
        with torch.device("meta"):
            m = WanDiT(cfg)
        m.load_state_dict(state, assign=True)
        m = m.set_dtype(torch.bfloat16).eval().requires_grad_(False)
        m.kernels = "triton"
        return m

    sweep = [(spec, spec) for spec in args.variant] if args.variant else VARIANTS
    variants = [("exact bf16 (fused kernels)", None)]  # the model's attention: auto
    variants += [(name, FastConfig.parse(spec)) for name, spec in sweep]
    if args.compile:
        variants.append(("FastConfig() + regional compile", FastConfig()))
    rows = []
    for name, fast in variants:
        print(f"... {name}", file=sys.stderr, flush=True)
        try:
            m = build()
            if fast is not None:
                apply_fast_mode(m, fast)
            if name.endswith("regional compile"):
                for block in m.blocks:
                    block.compile(fullgraph=False)
            t0 = time.perf_counter()
            with torch.no_grad():
                times, out = time_ms(lambda: m(latents, timestep, context), device, args.warmup, args.repeats)
            rows.append(
                {
                    "name": name,
                    "ms": round(statistics.median(times), 3),
                    "times_ms": [round(t, 3) for t in times],
                    "rel_l2_vs_fp32": rel_l2(out, ref),
                    "wall_s": round(time.perf_counter() - t0, 1),
                    "config": None if fast is None else fast.spec(),
                }
            )
        except Exception as exc:
            traceback.print_exc()
            rows.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
        m = out = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    exact = rows[0].get("rel_l2_vs_fp32")
    exact_ms = rows[0].get("ms")
    for r in rows:
        if "ms" in r:
            r["error_vs_bf16"] = round(r["rel_l2_vs_fp32"] / exact, 2) if exact else None
            # independent errors add in quadrature (so the --smoke sweep: the all-FP8 error is the
            # root sum of squares of bf16's and each family's added error, within 2%): the error a
            # variant adds, in units of bf16's, lets combinations be predicted; 5x allows sqrt(24)
            r["added_error_vs_bf16"] = round(math.sqrt(max(r["error_vs_bf16"] ** 2 - 1, 0.0)), 2) if exact else None
            r["speedup_vs_bf16"] = round(exact_ms / r["ms"], 3) if exact_ms else None
            r["ratio_vs_best_compile"] = round(r["ms"] / args.best_compile_ms, 3)
    return rows


def attention_section(args, device, b, l, n, d):
    """Section 2: cuDNN vs attention_int8 at [B, L, N, D]."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from wanscope.kernels.attention_int8 import attention_int8

    g = torch.Generator(device=device).manual_seed(2)
    q, k, v = (torch.randn(b, l, n, d, generator=g, device=device).to(torch.bfloat16) for _ in range(3))
    ref = attention_f64(q, k, v)
    flop = 4 * b * n * l * l * d

    def sdpa():
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if device.type != "cuda":
            return F.scaled_dot_product_attention(qt, kt, vt).transpose(1, 2)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt).transpose(1, 2)

    rows = []
    for name, fn in (
        ("cuDNN SDPA bf16", sdpa),
        ("ours INT8 QK^T, e4m3 PV", lambda: attention_int8(q, k, v, True)),
        ("ours INT8 QK^T, bf16 PV", lambda: attention_int8(q, k, v, False)),
    ):
        print(f"... attention: {name}", file=sys.stderr, flush=True)
        try:
            times, out = time_ms(fn, device, args.warmup + 1, args.repeats)
            ms = statistics.median(times)
            rows.append(
                {
                    "name": name,
                    "ms": round(ms, 3),
                    "tflops": round(flop / ms / 1e9, 1),
                    "rel_l2_vs_f64": rel_l2(out, ref),
                }
            )
        except Exception as exc:
            traceback.print_exc()
            rows.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
    return {"shape": [b, n, l, d], "flop": flop, "rows": rows}


def kernel_section(args, device, tokens, cfg):
    """Section 3: per-kernel times of one block's linears and the quantizers."""
    from wanscope.kernels.attention_int8 import quantize_qk, quantize_v_fp8
    from wanscope.kernels.fp8_linear import FP8Linear, quantize_fp8_rows

    c, f = cfg.dim, cfg.ffn_dim
    g = torch.Generator(device=device).manual_seed(3)
    rows = []

    def record(name, fn, flop=None, bytes_moved=None):
        try:
            times, _ = time_ms(fn, device, args.warmup + 1, args.repeats)
            ms = statistics.median(times)
            row = {"name": name, "ms": round(ms, 4)}
            if flop:
                row["tflops"] = round(flop / ms / 1e9, 1)
            if bytes_moved:
                row["gb_per_s"] = round(bytes_moved / ms / 1e6, 1)
            rows.append(row)
        except Exception as exc:
            traceback.print_exc()
            rows.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})

    with torch.no_grad():
        for label, k_in, n_out, gelu in (
            ("qkv", c, 3 * c, False),
            ("o / cross q / cross o", c, c, False),
            ("ffn up", c, f, False),
            ("ffn down (GELU in quantizer)", f, c, True),
        ):
            x = torch.randn(tokens, k_in, generator=g, device=device).to(torch.bfloat16)
            w = (torch.randn(n_out, k_in, generator=g, device=device) / k_in**0.5).to(torch.bfloat16)
            bias = torch.zeros(n_out, device=device, dtype=torch.bfloat16)
            flop = 2 * tokens * k_in * n_out
            record(f"GEMM {label} {tokens}x{k_in}x{n_out} bf16", lambda: F.linear(x, w, bias), flop)
            lin = FP8Linear(w, bias, gelu_input=gelu, fast_accum=FastConfig().fast_accum)  # as the fast mode
            record(f"GEMM {label} {tokens}x{k_in}x{n_out} FP8 (+quantize)", lambda: lin(x), flop)
            record(
                f"quantize rows [{tokens}, {k_in}]{' +GELU' if gelu else ''}",
                lambda: quantize_fp8_rows(x, gelu),
                bytes_moved=3 * x.numel(),
            )  # read 2, write 1 byte
        qk = torch.randn(1, tokens, cfg.num_heads, cfg.head_dim, generator=g, device=device).to(torch.bfloat16)
        record(
            f"quantize q/k INT8 [{tokens}, {c}] (smoothed)",
            lambda: quantize_qk(qk, 1.0, True),
            bytes_moved=5 * qk.numel(),
        )
        record(f"quantize v e4m3 [{tokens}, {c}] (torch ops)", lambda: quantize_v_fp8(qk))
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--label",
        type=result_label,
        default=None,
        help="what the run is, for the file name (NAME-YYYY-MM-DD-LABEL.json): lower-case, e.g. int8-3wg-a",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny preset on the CPU")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--best-compile-ms",
        type=float,
        default=527.9,
        help="diffusers' best compile per forward (dit_forward.py, H200, torch 2.11)",
    )
    ap.add_argument("--compile", action="store_true", help="also the fast mode with each block compiled")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SPEC",
        help="a FastConfig spec to run instead of the built-in sweep (repeatable), e.g. "
        "'linears=ffn,qkv exact_blocks=0,-1 int8_attention=no'",
    )
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: forward,attention,kernels")
    args = ap.parse_args(argv)
    if args.repeats < 5:
        ap.error("--repeats must be >= 5")
    from wanscope.errors import UsageError

    for spec in args.variant:  # before the minutes of setup
        try:
            FastConfig.parse(spec)
        except UsageError as exc:
            ap.error(f"--variant {spec!r}: {exc}")
    device = torch.device("cpu" if args.smoke else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("fast_mode: CUDA is not available (use --smoke for a CPU check)")
    preset = get_preset("tiny" if args.smoke else "wan2.1-t2v-1.3b")
    cfg = preset.dit
    shape = (1, cfg.in_channels, 2, 8, 8) if args.smoke else (1, cfg.in_channels, 21, 60, 104)
    tokens = shape[2] * shape[3] * shape[4] // math.prod(cfg.patch_size)
    skip = set(filter(None, args.skip.split(",")))

    result = {
        "benchmark": "fast_mode",
        "date": datetime.date.today().isoformat(),
        "preset": preset.name,
        "latents": list(shape),
        "tokens": tokens,
        "smoke": args.smoke,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "best_compile_ms": args.best_compile_ms,
    }
    result["triton"] = version("triton")
    sections = (
        ("forward", lambda: forward_section(args, device, replace(cfg), shape, cfg.text_len)),
        ("attention", lambda: attention_section(args, device, 1, tokens, cfg.num_heads, cfg.head_dim)),
        ("kernels", lambda: kernel_section(args, device, tokens, cfg)),
    )
    for key, run in sections:
        if key in skip:
            continue
        try:
            result[key] = run()
        except Exception as exc:
            traceback.print_exc()
            result[key] = {"error": f"{type(exc).__name__}: {exc}"}
        if device.type == "cuda":
            torch.cuda.empty_cache()

    path = write_result(args.out, "fast_mode", result, args.label)

    print(
        f"{result['device']}  torch {torch.__version__}  triton {result['triton']}  {preset.name}  "
        f"L={tokens}  best compile {args.best_compile_ms} ms (from dit_forward.py)"
    )
    fwd = result.get("forward")
    if isinstance(fwd, list):
        print(
            f"{'DiT forward':42} {'ms':>8} {'x bf16':>7} {'x compile':>9} {'rel L2':>9} {'err x bf16':>10} {'added':>6}"
        )
        for r in fwd:
            if "ms" not in r:
                print(f"{r['name'][:42]:42} FAILED: {r['error'][:90]}")
                continue
            print(
                f"{r['name'][:42]:42} {r['ms']:>8.1f} {r['speedup_vs_bf16'] or 0:>7.3f} "
                f"{r['ratio_vs_best_compile']:>9.3f} {r['rel_l2_vs_fp32']:>9.2e} {r['error_vs_bf16'] or 0:>10.2f} "
                f"{r['added_error_vs_bf16'] or 0:>6.2f}"
            )
        print(
            "x bf16: speed-up over the exact path; err x bf16: forward error over the exact path's (issue 9: "
            "<= 5); added: sqrt(err^2 - 1), the error a variant adds in bf16 units (they add in quadrature: "
            "a combination within sqrt(24) = 4.9 meets the bound)"
        )
    att = result.get("attention")
    if isinstance(att, dict) and "rows" in att:
        print(f"attention alone {att['shape']}: {'ms':>8} {'TFLOP/s':>8} {'rel L2 f64':>10}")
        for r in att["rows"]:
            print(
                f"  {r['name'][:32]:32} "
                + (
                    f"{r['ms']:>8.2f} {r['tflops']:>8.1f} {r['rel_l2_vs_f64']:>10.2e}"
                    if "ms" in r
                    else f"FAILED: {r['error'][:90]}"
                )
            )
    if isinstance(result.get("kernels"), list):
        print("kernels:")
        for r in result["kernels"]:
            extra = (
                f"{r['tflops']:>8.1f} TFLOP/s"
                if "tflops" in r
                else (f"{r['gb_per_s']:>8.1f} GB/s" if "gb_per_s" in r else "")
            )
            print(
                f"  {r['name'][:58]:58} "
                + (f"{r['ms']:>8.3f} ms {extra}" if "ms" in r else f"FAILED: {r['error'][:80]}")
            )
    print(f"wrote {path}")
    summary = {"benchmark": "fast_mode", "json": str(path)}
    if isinstance(fwd, list):
        summary.update(
            {
                r["name"]: {
                    k: r.get(k)
                    for k in (
                        "ms",
                        "ratio_vs_best_compile",
                        "rel_l2_vs_fp32",
                        "error_vs_bf16",
                        "added_error_vs_bf16",
                        "config",
                        "error",
                    )
                }
                for r in fwd
            }
        )
    if isinstance(att, dict) and "rows" in att:
        summary["attention"] = {
            r["name"]: {k: r.get(k) for k in ("ms", "tflops", "rel_l2_vs_f64", "error")} for r in att["rows"]
        }
    print(json.dumps(summary))
    return result


if __name__ == "__main__":
    main()
