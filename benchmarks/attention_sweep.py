"""Attention alone at the Wan2.1 1.3B shape: cuDNN against our Triton kernels, one GPU run.

At [B, L, N, D] = [1, 32760, 12, 128] bf16 on CUDA, on the layouts the fused DiT block hands
attention (q and k contiguous token-major, v the strided third of a [B, L, 3C] QKV output):

* cuDNN: ``wan.attention.attention(..., AttentionBackend.CUDNN)``, the DiT's own call (SDPA on
  the [B, N, L, D] transposed views, cuDNN forced);
* ``attention_int8`` (``kernels/attention_int8.py``), P V in e4m3 and in bf16 (it autotunes on
  its first call: that call is its warm-up);
* ``attention_hopper`` (``kernels/attention_hopper.py``, our Gluon kernel; on an sm_90 GPU with
  Gluon, else recorded as failed): bf16, and with INT8 ``Q K^T`` (``qk_int8=True``, the fast
  mode's; its quantization, ``qk_int8.quantize_qk_int8``, is timed alone as ``quant_ms``
  ``hopper_int8`` and included in its ``ms``);
* ``attention_flash`` (``kernels/attention_flash.py``) over ``GRID``: each precision (exact;
  int8 or e4m3 ``Q K^T``; e4m3 ``P V``) at several ``FlashConfig``s (``--skip-flash``: none).

Each contender: compile/first-call wall time, then the median of ``--repeats`` (>= 10) CUDA-event
timed calls after ``--warmup`` more, TFLOP/s (4 B N L^2 D FLOP), ratio to cuDNN, relative L2
error against float64 attention (``_common.attention_f64``: float64 on the GPU in query
chunks). A contender that fails (compile error, launch error) is recorded and skipped; once
``--budget-min`` minutes have passed the remaining configs are recorded as skipped. The JSON is
rewritten after every contender; a contender past ``--config-timeout-s`` (a hang) ends the run
with exit code 3, and an error that leaves the CUDA context unusable skips the rest (rerun those
with ``--only``), so one bad config never costs the run's earlier results. The 8-bit
rows also give the time of their quantization passes alone (``quantize_qk``, ``quantize_v``:
Triton kernels on the GPU; ``quant_ms``, included in ``ms``).

Prints a table and ends with one line of JSON; writes ``OUT/attention_sweep-YYYY-MM-DD.json``.
``--smoke`` runs the same code at [1, 40, 2, 32] on the CPU through Triton's interpreter
(timings meaningless; checks the script and every kernel variant).

    python3 benchmarks/attention_sweep.py --out benchmarks/results
    python3 benchmarks/attention_sweep.py --out DIR --skip-int8 --skip-flash   # cuDNN vs hopper
    python3 benchmarks/attention_sweep.py --smoke --out /tmp/sweep
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path

# (qk, pv, block_m, block_n, num_warps, num_stages, warp_specialize, maxnreg): exact first (issue 8),
# then the 8-bit modes (issue 9). Without warp specialization Triton's loop keeps a CTA's
# warpgroups in step (CTA barriers around the TMA ring) and waits for Q K^T before the softmax,
# so the tensor cores idle during a CTA's softmax unless another CTA on the SM is in its MMAs:
# hence configs that fit two or more CTAs per SM (registers x threads <= 64K, shared memory
# <= ~113 KB). With it (Triton 3.6 on Hopper: num_warps=4, then one producer and two consumer
# warpgroups of 64 rows each, 12 warps) the consumers run independently, FA3's structure without
# its ping-pong. Comments: CTAs per SM from ptxas's counts for sm_90a under Triton 3.6.0.
GRID = [
    ("exact", "exact", 128, 128, 8, 2, False, 0),  # 1 (204 regs, 160 KB)
    ("exact", "exact", 128, 128, 8, 3, False, 0),  # 1
    ("exact", "exact", 128, 64, 8, 3, False, 0),  # 1
    ("exact", "exact", 128, 64, 8, 2, False, 128),  # 2 (127 regs, 96 KB, no spills)
    ("exact", "exact", 128, 64, 8, 1, False, 0),  # 2 (no prefetch: the other CTA hides the loads)
    ("exact", "exact", 64, 64, 4, 2, False, 0),  # 2 (80 KB)
    ("exact", "exact", 64, 128, 4, 1, False, 0),  # 2
    ("exact", "exact", 64, 64, 4, 1, False, 0),  # 4
    ("int8", "exact", 128, 128, 8, 2, False, 0),  # 1
    ("int8", "exact", 64, 128, 4, 2, False, 0),  # 2
    ("int8", "exact", 64, 64, 4, 2, False, 0),  # 3
    ("e4m3", "e4m3", 128, 128, 8, 2, False, 0),  # 1
    ("e4m3", "e4m3", 64, 128, 4, 2, False, 0),  # 2
    ("e4m3", "e4m3", 64, 64, 4, 2, False, 0),  # 2
    # warp-specialized, last: new code paths in Triton, so a hang or a lost CUDA context costs least
    # here. Exact with 2 stages only: the 2026-11-30 H200 run got NaN with 3 stages and lost the
    # CUDA context with int8 Q K^T, and FlashConfig now refuses both (and every 8-bit mode)
    ("exact", "exact", 128, 128, 4, 2, True, 0),  # 1 (176 KB)
    ("exact", "exact", 128, 64, 4, 2, True, 0),  # 1
]


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--label",
        default=None,
        help="what the run is, for the file name (NAME-YYYY-MM-DD-LABEL.json): lower-case, e.g. int8-3wg-a",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny shape on the CPU through Triton's interpreter")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls after the first (default 2; smoke 1)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls, >= 10 (default 10; smoke 2)")
    ap.add_argument("--budget-min", type=float, default=4.0, help="stop starting new configs after this")
    ap.add_argument("--only", default="", help="comma-separated row indices of GRID to run (default: all)")
    ap.add_argument("--skip-int8", action="store_true", help="skip attention_int8 (it autotunes: ~40 s)")
    ap.add_argument("--skip-flash", action="store_true", help="skip attention_flash's GRID")
    ap.add_argument(
        "--config-timeout-s",
        type=float,
        default=150.0,
        help="a contender running longer is taken for a hang: results so far are written, exit 3",
    )
    args = ap.parse_args(argv)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 2)
    args.repeats = args.repeats if args.repeats is not None else (2 if args.smoke else 10)
    if args.repeats < 10 and not args.smoke:
        ap.error("--repeats must be >= 10")
    return args


def main(argv=None) -> dict:
    args = _parse(argv)
    if args.smoke:  # before triton's first import: triton.jit picks the interpreter then
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from _common import attention_f64, rel_l2, time_ms, version, write_result

    from wanscope.kernels.attention_flash import (
        FlashConfig,
        attention_flash,
        quantize_qk,
        quantize_v,
    )
    from wanscope.wan.attention import AttentionBackend, attention

    device = torch.device("cpu" if args.smoke else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("attention_sweep: CUDA is not available (use --smoke for a CPU check)")
    b, l, n, d = (1, 40, 2, 32) if args.smoke else (1, 32760, 12, 128)
    flop = 4 * b * n * l * l * d
    g = torch.Generator(device=device).manual_seed(0)
    qkv = torch.randn(b, l, 3 * n * d, generator=g, device=device).to(torch.bfloat16)  # [B, L, 3C]
    q, k = (qkv[..., i * n * d : (i + 1) * n * d].contiguous().unflatten(-1, (n, d)) for i in range(2))
    v = qkv[..., 2 * n * d :].unflatten(-1, (n, d))  # [B, L, N, D] view, rows 3C apart, as in wan/fused.py
    ref = attention_f64(q, k, v)

    result = {
        "benchmark": "attention_sweep",
        "date": datetime.date.today().isoformat(),
        "smoke": args.smoke,
        "shape_blnd": [b, l, n, d],
        "flop": flop,
        "torch": torch.__version__,
        "triton": version("triton"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "rows": [],
    }
    t_start = time.perf_counter()
    state = {"context_lost": None}

    def hang(row):
        row["error"] = f"timeout: still running after {args.config_timeout_s:.0f} s (a hang?)"
        result["rows"].append(row)
        path = write_result(args.out, "attention_sweep", result, args.label)
        print(f"attention_sweep: {row['name']} hung; results so far in {path}", file=sys.stderr, flush=True)
        os._exit(3)

    def run(name, fn, extra):
        row = {"name": name, **extra}
        print(f"... {name}", file=sys.stderr, flush=True)
        watchdog = threading.Timer(args.config_timeout_s, hang, (row,))
        watchdog.daemon = True
        watchdog.start()
        try:
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            row["first_call_s"] = round(time.perf_counter() - t0, 2)
            times, out = time_ms(fn, device, args.warmup, args.repeats)
            ms = statistics.median(times)
            row.update(
                ms=round(ms, 4),
                times_ms=[round(t, 4) for t in times],
                tflops=round(flop / ms / 1e9, 1),
                rel_l2_vs_f64=rel_l2(out, ref),
            )
        except Exception as exc:
            traceback.print_exc()
            row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            if device.type == "cuda":
                try:
                    torch.cuda.synchronize()
                except Exception:
                    state["context_lost"] = name
        finally:
            watchdog.cancel()
        result["rows"].append(row)
        write_result(args.out, "attention_sweep", result, args.label)
        if device.type == "cuda" and not state["context_lost"]:
            torch.cuda.empty_cache()
        return row

    run(
        "cuDNN SDPA bf16",
        lambda: attention(q, k, v, AttentionBackend.CUDNN if device.type == "cuda" else AttentionBackend.SDPA),
        {"kind": "cudnn"},
    )

    def int8_kernel(pv_fp8):  # imported here: a change to that module fails its rows, not the run
        from wanscope.kernels.attention_int8 import attention_int8

        return attention_int8(q, k, v, pv_fp8)

    if not args.skip_int8:
        run("attention_int8: int8 QK, e4m3 PV", lambda: int8_kernel(True), {"kind": "int8_kernel"})
        run("attention_int8: int8 QK, bf16 PV", lambda: int8_kernel(False), {"kind": "int8_kernel"})

    def hopper(qk_int8):
        from wanscope.kernels.attention_hopper import attention_hopper

        return attention_hopper(q, k, v, qk_int8=qk_int8)

    run("attention_hopper: bf16", lambda: hopper(False), {"kind": "hopper"})
    run("attention_hopper: int8 QK, bf16 PV", lambda: hopper(True), {"kind": "hopper", "quant": "hopper_int8"})

    def hopper_quantize():
        from wanscope.kernels.qk_int8 import quantize_qk_int8

        return quantize_qk_int8(q, k)

    quant_ms = {}
    for key, fn in (
        ("int8", lambda: quantize_qk(q, k, "int8")),
        ("e4m3", lambda: quantize_qk(q, k, "e4m3")),
        ("v_e4m3", lambda: quantize_v(v)),
        ("hopper_int8", hopper_quantize),
    ):
        try:
            quant_ms[key] = round(statistics.median(time_ms(fn, device, args.warmup, args.repeats)[0]), 4)
        except Exception as exc:
            traceback.print_exc()
            quant_ms[key] = f"{type(exc).__name__}: {exc}"
            if device.type == "cuda":
                try:
                    torch.cuda.synchronize()
                except Exception:
                    state["context_lost"] = f"quantize {key}"
    result["quant_ms"] = quant_ms
    for r in result["rows"]:
        if isinstance(quant_ms.get(r.get("quant")), float):
            r["quant_ms"] = quant_ms[r["quant"]]

    only = {int(i) for i in args.only.split(",") if i}
    for i, (qk, pv, bm, bn, warps, stages, ws, maxnreg) in enumerate(GRID):
        if args.skip_flash or (only and i not in only):
            continue
        cfg = FlashConfig(bm, bn, warps, stages, ws, maxnreg)
        name = (
            f"flash[{i}] qk={qk} pv={pv} {bm}x{bn} w{warps} s{stages}"
            + (" ws" if ws else "")
            + (f" maxnreg={maxnreg}" if maxnreg else "")
        )
        extra = {"kind": "flash", "index": i, "qk": qk, "pv": pv, "config": cfg.__dict__}
        if state["context_lost"]:
            result["rows"].append(
                {"name": name, **extra, "error": f"skipped: CUDA context lost at {state['context_lost']}"}
            )
            continue
        if time.perf_counter() - t_start > 60 * args.budget_min:
            result["rows"].append({"name": name, **extra, "error": "skipped: time budget"})
            continue
        row = run(name, lambda qk=qk, pv=pv, cfg=cfg: attention_flash(q, k, v, qk, pv, cfg), extra)
        parts = ([qk] if qk != "exact" else []) + (["v_e4m3"] if pv == "e4m3" else [])
        quant = [quant_ms[p] for p in parts if isinstance(quant_ms.get(p), float)]
        row["quant_ms"] = round(sum(quant), 4) if quant else None

    cudnn_ms = result["rows"][0].get("ms")
    for r in result["rows"]:
        if "ms" in r and cudnn_ms:
            r["x_cudnn"] = round(r["ms"] / cudnn_ms, 3)
    flash = [r for r in result["rows"] if r["kind"] == "flash" and "ms" in r]

    def best(rows):
        return min(rows, key=lambda r: r["ms"])["name"] if rows else None

    result["best"] = {
        "exact": best([r for r in flash if r["qk"] == r["pv"] == "exact"]),
        "fast_rel_l2_le_1e-2": best([r for r in flash if r["rel_l2_vs_f64"] <= 1e-2 and r["qk"] != "exact"]),
        "any": best(flash),
    }
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    path = write_result(args.out, "attention_sweep", result, args.label)

    print(
        f"{result['device']}  torch {torch.__version__}  triton {result['triton']}  [B, L, N, D] = {[b, l, n, d]}"
        f"  {flop / 1e12:.2f} TFLOP per call"
    )
    print(f"{'contender':58} {'ms':>8} {'TFLOP/s':>8} {'x cuDNN':>8} {'rel L2':>9} {'1st s':>6} {'quant ms':>8}")
    for r in result["rows"]:
        if "ms" not in r:
            print(f"{r['name'][:58]:58} FAILED: {r['error'][:100]}")
            continue
        qms = f"{r['quant_ms']:>8.3f}" if r.get("quant_ms") else f"{'':>8}"
        print(
            f"{r['name'][:58]:58} {r['ms']:>8.3f} {r['tflops']:>8.1f} {r.get('x_cudnn', 0):>8.3f} "
            f"{r['rel_l2_vs_f64']:>9.2e} {r['first_call_s']:>6.1f} {qms}"
        )
    print(f"quantization passes alone (ms): {quant_ms}")
    print(f"best: {result['best']}")
    print(f"wrote {path}")
    summary = {
        "benchmark": "attention_sweep",
        "json": str(path),
        "best": result["best"],
        "rows": {
            r["name"]: {k: r.get(k) for k in ("ms", "tflops", "x_cudnn", "rel_l2_vs_f64", "error")}
            for r in result["rows"]
        },
    }
    print(json.dumps(summary))
    return result


if __name__ == "__main__":
    main()
