"""Each fused op of ``wanscope.kernels`` against the torch ops it replaces, at the Wan2.1
1.3B/480p shapes (B=1, L=32,760 tokens, C=1,536, bf16 model, fp32 or bf16 residual stream).

For each case: median time of ``--repeats`` calls (CUDA events), the bytes the fused op must
move (its inputs read once, its outputs written once), achieved GB/s and its share of the
4.16 TB/s device-to-device copy rate measured on the H200 on 2026-11-30 (torch 2.11; the rate
behind the percentages of benchmarks/RESULTS.md, '2026-11-30: DiT forward with fused Triton kernels vs torch.compile'), the same for the
unfused torch path, and a correctness check on the GPU: max error of the fused output against
the op's fp32 reference (same math in torch ops), required within one ulp of the output dtype
at max|ref| or within 1.1x the torch path's own error. Also: the FFN up-projection with
cuBLASLt's GELU epilogue (``_addmm_activation``) against linear + tanh GELU, and a check that
the epilogue is the tanh form (fp32, zero input, so the output is GELU of the bias: its error
against tanh and erf GELU), and SDPA on the q/k/v layouts the fused block hands it (token-major views,
v a column slice of the QKV output) against head-major contiguous tensors, with the kernel each
picks.

Prints a table and one JSON line; writes ``OUT/kernels_bench-YYYY-MM-DD.json``. ``--smoke``
runs tiny shapes on the CPU (the torch fallbacks of the ops; timings meaningless).

    python benchmarks/kernels_bench.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import result_label, time_ms, write_result

from wanscope.kernels import gated_add, norm_modulate, rms_norm_rope
from wanscope.kernels import norm_modulate as nm_mod
from wanscope.kernels import rms_norm_rope as rr_mod
from wanscope.wan.attention import attention
from wanscope.wan.config import DiTConfig
from wanscope.wan.dit import RMSNorm, apply_rope, modulate, rope_tables
from wanscope.wan.fused import linear_gelu_tanh

COPY_TBPS = 4.16  # device-to-device copy, H200, 2026-11-30 (benchmarks/RESULTS.md, '2026-11-30: DiT forward with fused Triton kernels vs torch.compile')
nm_ref = sys.modules["wanscope.kernels.norm_modulate"].reference
rr_ref = sys.modules["wanscope.kernels.rms_norm_rope"].reference
del nm_mod, rr_mod


def median_ms(fn, device, repeats: int) -> float:
    """Median of ``repeats`` timed calls after 3 warm-up calls."""
    return statistics.median(time_ms(fn, device, 3, repeats)[0])


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def max_err(out, ref) -> tuple[float, float]:
    """(max abs error, tolerance = one ulp of out's dtype at max|ref|)."""
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    errs, tols = [], []
    for o, r in zip(outs, refs):
        errs.append((o.double() - r.double()).abs().max().item())
        tols.append(torch.finfo(o.dtype).eps * r.double().abs().max().item())
    return max(errs), min(tols)


def cases(device, l, c, n, ffn):
    """(name, fused fn, torch fn, fp32-reference fn, bytes the fused op moves)."""
    g = torch.Generator(device=device).manual_seed(0)
    bf = torch.bfloat16

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, device=device).to(dtype)

    table = rnd(1, 6, c)
    shift, scale, gate = table[:, 0], table[:, 1] * 0.1, table[:, 2]
    norm = nn.LayerNorm(c, 1e-6, elementwise_affine=False).to(device)
    norm3 = nn.LayerNorm(c, 1e-6).to(device)
    norm3.weight.data.copy_(rnd(c))
    norm3.bias.data.copy_(rnd(c))
    y = rnd(1, l, c, dtype=bf)
    out = []
    for sdt in (torch.float32, bf):
        tag = "fp32" if sdt == torch.float32 else "bf16"
        x = rnd(1, l, c, dtype=sdt)
        out += [
            (
                f"norm_modulate ({tag} stream)",
                lambda x=x: norm_modulate(x, shift=shift, scale=scale, out_dtype=bf),
                lambda x=x: modulate(x, norm, shift, scale).to(bf),
                lambda x=x: nm_ref(x, None, None, None, None, shift, scale, 1e-6, bf)[1],
                nbytes(x) + l * c * 2,
            ),
            (
                f"add_norm_modulate gate+norm3 ({tag})",
                lambda x=x: norm_modulate(x, residual=y, gate=gate, weight=norm3.weight, bias=norm3.bias, out_dtype=bf),
                lambda x=x: (lambda xs: (xs, F.layer_norm(xs.float(), (c,), norm3.weight, norm3.bias, 1e-6).to(bf)))(
                    (x.float() + y * gate[:, None]).type_as(x)
                ),
                lambda x=x: nm_ref(x, y, gate, norm3.weight, norm3.bias, None, None, 1e-6, bf),
                2 * nbytes(x) + nbytes(y) + l * c * 2,
            ),
            (
                f"add_norm_modulate norm2+mod ({tag})",
                lambda x=x: norm_modulate(x, residual=y, shift=shift, scale=scale, out_dtype=bf),
                lambda x=x: (lambda xs: (xs, modulate(xs, norm, shift, scale).to(bf)))(x + y),
                lambda x=x: nm_ref(x, y, None, None, None, shift, scale, 1e-6, bf),
                2 * nbytes(x) + nbytes(y) + l * c * 2,
            ),
            (
                f"gated_add ({tag})",
                lambda x=x: gated_add(x, y, gate),
                lambda x=x: (x.float() + y * gate[:, None]).type_as(x),
                lambda x=x: nm_ref(x, y, gate, None, None, None, None, 0.0, sdt, False)[0],
                2 * nbytes(x) + nbytes(y),
            ),
        ]
    cfg = DiTConfig(dim=c, num_heads=n)
    f = 21 if l == 32760 else 1
    hw = l // f
    cos, sin = rope_tables(cfg, (f, 1, hw), device)  # the same table sizes as the real grid
    qkv = rnd(1, l, 3 * c, dtype=bf)
    rms = RMSNorm(c, 1e-6).to(device)
    rms.weight.data.copy_(rnd(c).abs() + 0.5)
    q_slice = qkv[..., :c]
    out.append(
        (
            "rms_norm_rope (q slice of QKV)",
            lambda: rms_norm_rope(q_slice, rms.weight, (cos, sin), n, 1e-6),
            lambda: apply_rope(rms(q_slice).unflatten(-1, (n, -1)), cos, sin),
            lambda: rr_ref(q_slice, rms.weight, cos, sin, n, 1e-6).unflatten(-1, (n, -1)),
            2 * l * c * 2 + nbytes(cos, sin),
        )
    )
    h = rnd(1, l, c, dtype=bf)
    up = nn.Linear(c, ffn).to(device, bf)
    out.append(
        (
            "FFN up + GELU-tanh (cuBLASLt epilogue on CUDA)",
            lambda: linear_gelu_tanh(h, up),
            lambda: F.gelu(up(h), approximate="tanh"),
            lambda: F.gelu(F.linear(h.float(), up.weight.float(), up.bias.float()), approximate="tanh"),
            nbytes(h, up.weight) + l * ffn * 2,
        )
    )
    return out, (h, up)


def attention_layouts(device, l, c, n, repeats):
    """SDPA time and kernel for the fused block's layouts vs head-major contiguous."""
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator(device=device).manual_seed(1)
    d = c // n
    qkv = torch.randn(1, l, 3 * c, generator=g, device=device).to(torch.bfloat16)
    q, k, v = (qkv[..., i * c : (i + 1) * c].unflatten(-1, (n, d)) for i in range(3))  # [B, L, N, D] views
    q, k = q.contiguous(), k.contiguous()  # as rms_norm_rope writes them
    layouts = {
        "token-major views, v a QKV slice (ours fused)": lambda: attention(q, k, v),
        "token-major, all contiguous (ours torch)": (lambda vc: lambda: attention(q, k, vc))(v.contiguous()),
        "head-major contiguous [B, N, L, D]": (lambda qh, kh, vh: lambda: F.scaled_dot_product_attention(qh, kh, vh))(
            *(t.transpose(1, 2).contiguous() for t in (q, k, v))
        ),
    }
    rows = []
    for name, fn in layouts.items():
        try:
            ms = median_ms(fn, device, repeats)
            kernel = None
            if device.type == "cuda":
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    fn()
                    torch.cuda.synchronize()
                names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                kernel = max(
                    set(names),
                    key=lambda s: ("attention" in s.lower() or "fmha" in s.lower() or "flash" in s.lower(), len(s)),
                    default=None,
                )
            flops = 4 * l * l * c
            rows.append(
                {"name": name, "ms": round(ms, 3), "tflops": round(flops / (ms * 1e-3) / 1e12, 1), "kernel": kernel}
            )
        except Exception as exc:
            traceback.print_exc()
            rows.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
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
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    device = torch.device("cpu" if args.smoke else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("kernels_bench: CUDA is not available (use --smoke)")
    l, c, n, ffn = (40, 64, 2, 96) if args.smoke else (32760, 1536, 12, 8960)

    rows = []
    with torch.no_grad():
        built, (h, up) = cases(device, l, c, n, ffn)
        for name, fused, unfused, reference, moved in built:
            print(f"... {name}", file=sys.stderr, flush=True)
            try:
                ref = reference()
                err, tol = max_err(fused(), ref)
                torch_err, _ = max_err(unfused(), ref)
                fused_ms = median_ms(fused, device, args.repeats)
                torch_ms = median_ms(unfused, device, args.repeats)
                gbps = moved / (fused_ms * 1e-3) / 1e9
                row = {
                    "name": name,
                    "fused_ms": round(fused_ms, 4),
                    "torch_ms": round(torch_ms, 4),
                    "speedup": round(torch_ms / fused_ms, 2),
                    "bytes": moved,
                    "fused_gbps": round(gbps, 1),
                    "pct_of_copy": round(100 * gbps / (COPY_TBPS * 1e3), 1),
                    "max_err": err,
                    "torch_max_err": torch_err,
                    "tol": tol,
                    "ok": err <= max(tol, 1.1 * torch_err),
                }
            except Exception as exc:
                traceback.print_exc()
                row = {"name": name, "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
        # the epilogue's GELU must be the tanh form (they differ by up to ~2e-4 near |x| = 2,
        # far above fp32 rounding): zero input makes the GEMM output exactly the bias
        probe = nn.Linear(64, 512).to(device)
        probe.bias.data.copy_(torch.linspace(-5, 5, 512, device=device))
        gelu = linear_gelu_tanh(torch.zeros(128, 64, device=device), probe).double()
        gelu_check = {
            "max_err_vs_tanh": (gelu - F.gelu(probe.bias, approximate="tanh").double()).abs().max().item(),
            "max_err_vs_erf": (gelu - F.gelu(probe.bias).double()).abs().max().item(),
        }
        gelu_check["is_tanh"] = gelu_check["max_err_vs_tanh"] < 1e-5 < gelu_check["max_err_vs_erf"]
        attn_rows = attention_layouts(device, l, c, n, max(5, args.repeats // 4))

    today = datetime.date.today().isoformat()
    result = {
        "benchmark": "kernels_bench",
        "date": today,
        "shape": {"L": l, "C": c, "N": n, "ffn": ffn},
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "copy_tbps": COPY_TBPS,
        "kernels": rows,
        "gelu_epilogue": gelu_check,
        "attention_layouts": attn_rows,
        "smoke": args.smoke,
    }
    path = write_result(args.out, "kernels_bench", result, args.label)

    print(f"{result['device']}  torch {torch.__version__}  triton {result['triton']}  L={l} C={c}")
    header = (
        f"{'op':48} {'fused ms':>9} {'torch ms':>9} {'x':>6} {'GB/s':>7} {'% copy':>7} {'max err':>9} "
        f"{'torch err':>9} ok"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        if "error" in r:
            print(f"{r['name']:48} FAILED: {r['error'][:100]}")
            continue
        print(
            f"{r['name'][:48]:48} {r['fused_ms']:>9.3f} {r['torch_ms']:>9.3f} {r['speedup']:>6.2f} "
            f"{r['fused_gbps']:>7.0f} {r['pct_of_copy']:>7.1f} {r['max_err']:>9.2e} {r['torch_max_err']:>9.2e} {r['ok']}"
        )
    print(
        f"GELU epilogue: max err vs tanh {gelu_check['max_err_vs_tanh']:.2e}, vs erf "
        f"{gelu_check['max_err_vs_erf']:.2e}: tanh form {gelu_check['is_tanh']}"
    )
    for r in attn_rows:
        print(
            f"SDPA {r['name']:48} "
            + (
                f"{r['ms']:.2f} ms {r['tflops']} TFLOP/s {r['kernel']}"
                if "error" not in r
                else f"FAILED: {r['error'][:100]}"
            )
        )
    print(f"wrote {path}")
    print(
        json.dumps(
            {
                "benchmark": "kernels_bench",
                "json": str(path),
                "all_ok": all(r.get("ok") for r in rows),
                "gelu_is_tanh": gelu_check["is_tanh"],
                **{r["name"]: {k: r.get(k) for k in ("fused_ms", "torch_ms", "pct_of_copy", "ok")} for r in rows},
            }
        )
    )
    return result


if __name__ == "__main__":
    main()
