"""``--memory-history`` on a CUDA GPU, three ways, each checked:

(a) **a real workload's snapshot, small enough to commit**: the CUDA allocator's history,
    recorded as ``wanscope profile --memory-history`` records it (``wanscope.memory.record``),
    over the build of our 1.3B DiT (random bf16 weights) and ``--forwards`` forwards at a small
    size (latents [1, 16, 3, 30, 52]: 416x240x9, 1,170 tokens; 512 text tokens); where the file
    is larger than ``--max-bytes``, recorded again with a ring buffer cut to fit (its oldest
    events dropped: a trace that begins mid-run). Written to ``--snapshot``.
(b) **an out-of-memory error under ``wanscope profile --memory-history -- COMMAND``**:
    ``benchmarks/oom_program.py`` keeps doubling an allocation until the GPU is full; the
    snapshot must show the failed allocation (the size of the program's last request), its stack
    (``make_activation`` < ``train_step`` < ``main``) and what held the memory; copied to
    ``OUT/h200_oom_snapshot.pickle``.
(c) **our engine**: ``wanscope profile --preset tiny --memory-history``, which must write the
    snapshot, summarize it and put it into ``report.json``.

(b) and (c) run first, in children, while this process has not started CUDA. Their traces are
deleted once checked; their logs, ``report.json`` and ``report.html`` stay in ``--out``.

    python3 benchmarks/memory_snapshot_capture.py --out DIR [--snapshot PATH] [--label L]

Needs a CUDA GPU. Writes ``memory_snapshot_capture-DATE[-label].json`` and the logs into
``--out``; the last line printed is the same JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

import torch
from _common import result_label, write_result
from memory_trace_program import run_dit

from wanscope.memory import record
from wanscope.memory.cli import snapshot_doc

GIB = 1 << 30


def record_dit(path: Path, forwards: int, max_entries: int) -> dict:
    """Record the DiT's build and ``forwards`` forwards into ``path``; returns its summary."""
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(
        enabled="all", context=record.CONTEXT, stacks=record.STACKS, max_entries=max_entries
    )
    started = time.perf_counter()
    run_dit(3, 30, 52, max(forwards, 1))  # 416x240x9
    record.dump(path, "end")
    torch.cuda.memory._record_memory_history(enabled=None)
    seconds = time.perf_counter() - started
    torch.cuda.empty_cache()
    doc = snapshot_doc(path, top=5)
    (d,) = doc["devices"]
    return {
        "path": str(path),
        "bytes": path.stat().st_size,
        "max_entries": max_entries,
        "forwards": forwards,
        "seconds": round(seconds, 2),
        "events": d["trace"]["events"],
        "begins_mid_run": d["trace"]["begins_mid_run"],
        "peak_allocated_bytes": d["peak_allocated_bytes"],
        "peak_reserved_bytes": d["peak_reserved_bytes"],
        "at": d["at"],
        "allocated_bytes": d["allocated_bytes"],
        "reserved_unused_bytes": d["reserved_unused_bytes"],
        "dump": d["dump"],
        "inconsistent_events": d["trace"]["inconsistent_events"],
        "dump_mismatches": d["trace"]["dump_mismatches"],
        "top_groups": [{k: g[k] for k in ("where", "bytes", "allocations")} for g in d["groups"]],
        "notes": doc["notes"],
    }


def wanscope(*args: str, log: Path) -> tuple[int, float, str]:
    """``python3 -m wanscope ARGS`` (this tree's ``src`` first on the path) with its output in
    ``log``; (exit status, wall seconds, the output)."""
    env = dict(os.environ, COLUMNS="200")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "wanscope", *args], capture_output=True, text=True, env=env, cwd=REPO)
    log.write_text(f"$ wanscope {' '.join(args)}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    return r.returncode, time.perf_counter() - started, r.stdout + r.stderr


def oom_run(out: Path) -> dict:
    """(b): the program that runs out of memory, under ``profile --memory-history``; checked."""
    folder = out / "oom"
    program = REPO / "benchmarks" / "oom_program.py"
    code, wall, text = wanscope(
        "profile", "--memory-history", "--out", str(folder), "--", sys.executable, str(program), log=out / "oom.log"
    )
    requests = [int(n) for n in re.findall(r"requesting (\d+) bytes", text)]
    entry = {"exit_code": code, "wall_s": round(wall, 1), "requests": requests}
    snapshot = folder / "memory_snapshot.pickle"
    if not snapshot.exists():
        entry["checks"] = {"snapshot_written": False}
        return entry
    shutil.copyfile(snapshot, out / "h200_oom_snapshot.pickle")
    doc = snapshot_doc(snapshot)
    (d,) = doc["devices"]
    oom = d["oom"] or {}
    names = [f["name"] for f in oom.get("stack", [])]
    report = json.loads((folder / "report.json").read_text()) if (folder / "report.json").exists() else {}
    entry.update(
        snapshot_bytes=snapshot.stat().st_size,
        recording=doc["recording"],
        oom=oom,
        at=d["at"],
        allocated_bytes=d["allocated_bytes"],
        allocations=d["allocations"],
        reserved_bytes=d["reserved_bytes"],
        reserved_unused_bytes=d["reserved_unused_bytes"],
        groups=[{k: g[k] for k in ("where", "bytes", "allocations")} for g in d["groups"]],
        notes=doc["notes"],
        trace=d["trace"],
    )
    entry["checks"] = {
        "snapshot_written": True,
        "exit_code_is_the_programs": code == 1,
        "oom_found": bool(oom),
        "size_is_the_last_request": bool(requests) and oom.get("size_bytes") == requests[-1],
        "stack_is_the_programs": names[:3] == ["make_activation", "train_step", "main"],
        "frame_is_make_activation": (oom.get("frame") or {}).get("name") == "make_activation",
        "less_free_than_asked": oom.get("device_free_bytes", 1 << 62) < oom.get("size_bytes", 0),
        "allocated_is_what_the_program_held": d["allocated_bytes"] == GIB + sum(requests[:-1]),
        "summary_printed": "out of memory - the failed allocation asked for" in text,
        "report_has_it": "memory_snapshot" in report,
        "trace_and_dump_agree": d["trace"]["dump_mismatches"] == 0 and d["trace"]["inconsistent_events"] == 0,
    }
    return entry


def engine_run(out: Path) -> dict:
    """(c): our engine's tiny preset with ``--memory-history``; checked."""
    folder = out / "engine"
    code, wall, text = wanscope(
        "profile", "--preset", "tiny", "--memory-history", "--out", str(folder), log=out / "engine.log"
    )
    entry = {"exit_code": code, "wall_s": round(wall, 1)}
    snapshot = folder / "memory_snapshot.pickle"
    report = json.loads((folder / "report.json").read_text()) if (folder / "report.json").exists() else {}
    memory = report.get("memory_snapshot") or {}
    devices = memory.get("devices") or [{}]
    entry.update(
        snapshot_bytes=snapshot.stat().st_size if snapshot.exists() else None,
        peak_allocated_bytes=devices[0].get("peak_allocated_bytes"),
        events=(devices[0].get("trace") or {}).get("events"),
        top_groups=[{k: g[k] for k in ("where", "bytes")} for g in devices[0].get("groups", [])[:5]],
        peak_memory_bytes=(report.get("run") or {}).get("peak_memory_bytes"),
    )
    entry["checks"] = {
        "exit_code_0": code == 0,
        "snapshot_written": snapshot.exists(),
        "report_has_it": bool(memory),
        "summary_printed": "live allocations by stack" in text,
        "recorded_the_whole_run": (memory.get("recording") or {}).get("dumped") == "end",
        "engine_frames_found": any("wanscope/" in g["where"] for g in devices[0].get("groups", [])),
    }
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--snapshot", type=Path, help="where (a) writes its snapshot (default OUT/h200_memory_snapshot.pickle)"
    )
    ap.add_argument("--forwards", type=int, default=2)
    ap.add_argument("--max-bytes", type=int, default=2_000_000, help="the largest snapshot (a) keeps")
    ap.add_argument("--label", type=result_label)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.snapshot or args.out / "h200_memory_snapshot.pickle"
    result = {"benchmark": "memory_snapshot_capture", "date": time.strftime("%Y-%m-%d"), "random_weights": True}
    # the child runs first, while this process holds no CUDA context (it starts with (a))
    result["oom"] = oom_run(args.out)
    print("oom", json.dumps(result["oom"])[:1500], file=sys.stderr, flush=True)
    result["engine"] = engine_run(args.out)
    print("engine", json.dumps(result["engine"])[:800], file=sys.stderr, flush=True)
    for folder in (args.out / "oom", args.out / "engine"):
        for trace in folder.glob("*.json.gz"):  # checked; not needed back
            trace.unlink()
    result.update(
        gpu=torch.cuda.get_device_name(0),
        torch=torch.__version__,
        total_memory_bytes=torch.cuda.get_device_properties(0).total_memory,
    )
    dit = record_dit(path, args.forwards, record.MAX_ENTRIES)
    tries = [dit]
    while dit["bytes"] > args.max_bytes and dit["max_entries"] > 100:
        fit = min(dit["events"], dit["max_entries"]) * args.max_bytes * 0.8 / dit["bytes"]
        dit = record_dit(path, args.forwards, max(100, int(fit)))
        tries.append(dit)
    result["dit"] = {**dit, "tries": [{k: t[k] for k in ("max_entries", "events", "bytes")} for t in tries]}
    print("dit", json.dumps(result["dit"])[:800], file=sys.stderr, flush=True)
    result["ok"] = all(result["oom"]["checks"].values()) and all(result["engine"]["checks"].values())
    result["ok"] = result["ok"] and dit["bytes"] <= args.max_bytes and dit["dump_mismatches"] == 0
    out = write_result(args.out, "memory_snapshot_capture", result, args.label)
    print(f"wrote {out}", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
