"""Terminal rendering of the ``analyze`` result with rich tables."""

from __future__ import annotations

from rich.console import Console

from wanscope.clitools import console as make_console
from wanscope.report.kernel_names import display_names
from wanscope.report.tables import DataTable, clean, quoted, short_name
from wanscope.report.units import fmt_bytes, fmt_ns, fmt_pct

DEFINITIONS = (
    "Definitions: window = first to last GPU activity (kernels, memcpy, memset) per device; "
    "busy = union of activity over all streams; utilization = busy / window; "
    "pct = share of summed kernel time; idle gap = hole in the busy union, ended by next_op."
)
RANKS_DEFINITIONS = (
    "Ranks: communication = kernels of the communication category (NCCL, RCCL, symmetric memory, custom all-reduces); "
    "overlap = time in which "
    "communication and compute kernels ran together on the device; exposed = communication with no "
    "compute beside it; work = step time - exposed communication; the slowest rank of a step has the most work "
    "(the others wait for it inside their collectives)."
)
STACK_FRAMES_SHOWN = 8
HOST_THREADS_SHOWN = 4  # the busiest threads, those with a tenth of the busiest's time or more


def render_analysis(result: dict, console: Console | None = None, used: str | None = None) -> None:
    """Print the analysis summary: per device utilization, categories, top kernels, gaps
    with the stack behind the largest, then syncs, steps, the host side, the rooflines, memory, the ``ranks``
    section (with several ranks) and warnings."""
    c = console or make_console()
    if used:
        c.print(f"[bold]trace:[/bold] {quoted(used)}", soft_wrap=True)  # a path is not cut at the width
    for note in result["notes"]:
        c.print(f"[yellow]{quoted(note)}[/yellow]")
    paths = [src["path"] for src in result["sources"]]
    for d in result["devices"]:
        label = f"rank {d['rank']} · device {d['device']}"
        if len(paths) > 1 and d.get("source") is not None:  # which input it came from
            label += f" · {paths[d['source']]}"
        c.rule(label)
        c.print(
            f"window {fmt_ns(d['window_ns'])} · busy {fmt_ns(d['busy_ns'])} · "
            f"[bold]utilization {fmt_pct(d['utilization_pct'])}[/bold] · "
            f"{d['kernel_count']:,} kernels, {fmt_ns(d['kernel_time_ns'])} summed "
            f"(kernel-only busy {fmt_ns(d['kernel_busy_ns'])}) · "
            f"{d['memop_count']:,} memory ops, {fmt_ns(d['memop_time_ns'])}"
        )
        t = DataTable("category", "count", "time", "% of kernel time", title="time by category")
        for row in d["categories"]:
            t.add_row(row["category"], f"{row['count']:,}", fmt_ns(row["total_ns"]), fmt_pct(row["pct"]))
        c.print(t)
        comm = d.get("communication")
        if comm:
            c.print(
                f"communication: {comm['communication_count']:,} kernels, {fmt_ns(comm['communication_ns'])} "
                f"(busy {fmt_ns(comm['communication_busy_ns'])}) · overlap with compute "
                f"{fmt_ns(comm['overlap_ns'])} ({fmt_pct(comm['overlap_pct'])}) · "
                f"exposed {fmt_ns(comm['exposed_communication_ns'])}"
            )
        t = DataTable("kernel", "count", "total", "mean", "%", title="top kernels")
        shown = display_names(
            [k["name"] for k in d["top_kernels"] + d.get("fused_kernels", []) if k["name"] != "other"]
            + [gap["next_op"]["name"] for gap in d["gaps"]["largest"]]
        )
        for row in d["top_kernels"]:
            t.add_row(
                short_name(shown.get(row["name"], row["name"])),
                f"{row['count']:,}",
                fmt_ns(row["total_ns"]),
                fmt_ns(row["mean_ns"]),
                fmt_pct(row["pct"]),
            )
        c.print(t)
        if d.get("fused_kernels"):
            t = DataTable(
                "fused Triton kernel",
                "kind",
                "ops (from the name; Inductor may list only some)",
                "count",
                "total",
                "%",
                title="fused kernels",
            )
            for k in d["fused_kernels"]:
                ops = ", ".join(k["ops"]) + (f" (+ unmatched: {', '.join(k['unmatched'])})" if k["unmatched"] else "")
                t.add_row(
                    short_name(shown[k["name"]], 60),
                    k["kind"] or "-",
                    ops,
                    f"{k['count']:,}",
                    fmt_ns(k["total_ns"]),
                    fmt_pct(k["pct"]),
                )
            c.print(t)
        g = d["gaps"]
        hist = ", ".join(f"{k}: {v['count']}" for k, v in g["histogram"].items())
        c.print(f"idle gaps: {g['count']:,} totalling {fmt_ns(g['total_ns'])} ({hist})")
        t = DataTable("gap", "ends at (next_op)", "launched from (innermost frames last)", title="largest idle gaps")
        for gap in g["largest"]:
            stack = gap["stack"][-STACK_FRAMES_SHOWN:]
            more = len(gap["stack"]) - len(stack)
            t.add_row(
                fmt_ns(gap["dur_ns"]),
                short_name(shown[gap["next_op"]["name"]], 50),
                (f"… {more} outer frames\n" if more else "") + "\n".join(clean(f) for f in stack),
            )
        c.print(t)
    if result["syncs"]:
        t = DataTable("kind", "rank", "api", "op", "frame", "wait", "GPU idle after", title="host-device syncs")
        for s in result["syncs"]:
            t.add_row(
                s["kind"],
                str(s["rank"]),
                s["api"] or "-",
                s["op"] or "-",
                s["frame"] or "-",
                fmt_ns(s["wait_ns"]),
                fmt_ns(s["gpu_idle_after_ns"]),
            )
        c.print(t)
    else:
        c.print("host-device syncs: none")
    if result["steps"]:
        t = DataTable("rank", "step", "CPU time", "GPU time", title="steps")
        for s in result["steps"]:
            t.add_row(str(s["rank"]), str(s["step"]), fmt_ns(s["cpu_dur_ns"]), fmt_ns(s["gpu_dur_ns"]))
        c.print(t)
    if result.get("host"):
        render_host(result["host"], c)
    if result.get("roofline"):
        render_roofline(result["roofline"], c)
    for m in result.get("memory", []):
        where = "CPU" if m["device"] == -1 else f"device {m['device']}"
        c.print(
            f"memory, rank {m['rank']} · {where}: peak allocated {fmt_bytes(m['peak_allocated_bytes'])} "
            f"· peak reserved {fmt_bytes(m['peak_reserved_bytes'])} · {m['events']:,} events"
        )
        t = DataTable("allocated by (outermost aten op)", "live at the peak", "blocks", title="memory held at the peak")
        for row in m["at_peak"]:
            t.add_row(row["name"], fmt_bytes(row["bytes"]), f"{row['blocks']:,}")
        c.print(t)
    if "ranks" in result:
        render_ranks(result["ranks"], c)
    if result["warnings"]:
        c.print(
            "ingest warnings (records excluded or flagged): "
            + ", ".join(f"{k} {v:,}" for k, v in result["warnings"].items())
        )
    c.print(f"[dim]{DEFINITIONS}[/dim]")


def render_host(h: dict, c: Console) -> None:
    """Host time by op for the busiest threads, the Python frames with most self time, launch
    overhead and the launch queue (``analysis.host``)."""
    where = "inside the steps" if h["window"] == "steps" else "over the whole trace"
    threads = h["threads"]
    busiest = threads[0]["busy_ns"] if threads else 0
    shown = [t for t in threads[:HOST_THREADS_SHOWN] if t["busy_ns"] >= busiest / 10]
    for th in shown:
        t = DataTable(
            "op",
            "kind",
            "count",
            "total",
            "self",
            "% of busy",
            title=f"host time by op · rank {th['rank']} · pid {th['pid']} · tid {th['tid']} · "
            f"busy {fmt_ns(th['busy_ns'])} {where}",
        )
        for op in th["ops"]:
            t.add_row(
                short_name(op["name"], 70),
                op["kind"] or "-",
                f"{op['count']:,}",
                fmt_ns(op["total_ns"]),
                fmt_ns(op["self_ns"]),
                fmt_pct(op["self_pct"]),
            )
        c.print(t)
    if len(threads) > len(shown):
        c.print(f"host: {len(threads) - len(shown)} more thread(s) in the JSON (analyze --format json, report.json)")
    if h["python_frames"]:
        t = DataTable("Python frame", "count", "total", "self", title="Python frames with most self time")
        for f in h["python_frames"]:
            t.add_row(short_name(f["name"], 80), f"{f['count']:,}", fmt_ns(f["total_ns"]), fmt_ns(f["self_ns"]))
        c.print(t)
    for row in h["launch"]:
        calls = quoted(", ".join(f"{x['name']} {fmt_ns(x['total_ns'])}" for x in row["top_calls"]))
        rate = "-" if row["launches_per_s"] is None else f"{row['launches_per_s']:,.0f}/s"
        c.print(
            f"launch overhead, rank {row['rank']} · pid {row['pid']}: CUDA API {fmt_ns(row['api_ns'])} in "
            f"{row['api_calls']:,} calls ({fmt_pct(row['api_pct'])} of {fmt_ns(row['window_ns'])}) · "
            f"{row['launches']:,} kernel launches, {rate} · {calls}"
        )
    for q in h["launch_queue"]:
        c.print(
            f"launch queue, rank {q['rank']} · device {q['device']}: kernels launched but not yet started: "
            f"max {q['max']:,}, mean {q['mean']:,.1f} over {fmt_ns(q['end_ns'] - q['start_ns'])}"
        )


def _num(x, fmt: str = ",.1f") -> str:
    return "-" if x is None else format(x, fmt)


def _dims(dims) -> str:
    """Recorded input shapes, the tensors only: ``[1, 32760, 1536] x [1536, 1536]``."""
    if dims is None:
        return "-"
    return " x ".join(str(d) for d in dims if isinstance(d, list) and d) or "-"


def render_roofline(roof: dict, c: Console) -> None:
    """Per device: the peaks used, the op rows furthest below their roof, the kernel categories,
    and the kernel time in ops without a FLOP count (``analysis.roofline``)."""
    for d in roof["devices"]:
        p = d["peaks"]
        srcs = p["sources"]
        origin = "measured" if "measured" in srcs.values() else ("datasheet" if p["matched"] else srcs.get("bandwidth"))
        c.print(
            f"roofline peaks, rank {d['rank']} · device {d['device']} ({p['gpu'] or 'name not recorded'}"
            f"{', ' + p['matched'] if p['matched'] else ''}, {origin or 'unknown'}): "
            f"BF16 {_num(p['bf16_tflops'])} · FP8 {_num(p['fp8_tflops'])} · FP32 {_num(p['fp32_tflops'])} TFLOP/s · "
            f"DRAM {_num(p['bandwidth_gbps'], ',.0f')} GB/s · ops with a FLOP count hold "
            f"{fmt_pct(d['counted_pct'])} of {fmt_ns(d['kernel_ns'])} kernel time"
        )
        t = DataTable(
            "op",
            "input shapes",
            "calls",
            "GPU time",
            "TFLOP/s",
            "GB/s",
            "FLOP/B",
            "bound",
            "% of roof",
            "lost",
            title="rooflines: ops furthest below their roof (time lost = GPU time - time at the roof)",
        )
        for r in d["ops"]:
            t.add_row(
                short_name(r["name"], 40),
                short_name(_dims(r["input_dims"]), 48),
                f"{r['count']:,}",
                fmt_ns(r["gpu_ns"]),
                _num(r["achieved_tflops"]),
                _num(r["achieved_gbps"], ",.0f"),
                _num(r["intensity"]),
                r["bound"] or "-",
                fmt_pct(r["roof_pct"]),
                fmt_ns(r["lost_ns"]),
            )
        c.print(t)
        t = DataTable(
            "category", "kernel time", "counted", "TFLOP/s", "GB/s", "% of roof", "lost", title="rooflines by category"
        )
        for r in d["categories"]:
            t.add_row(
                r["category"],
                fmt_ns(r["kernel_ns"]),
                fmt_ns(r["counted_ns"]),
                _num(r["achieved_tflops"]),
                _num(r["achieved_gbps"], ",.0f"),
                fmt_pct(r["roof_pct"]),
                fmt_ns(r["lost_ns"]),
            )
        c.print(t)
        if d["uncounted"]:
            c.print(
                "kernel time without a FLOP count, by innermost op: "
                + ", ".join(f"{u['name']} {fmt_ns(u['gpu_ns'])}" for u in d["uncounted"])
            )


def render_ranks(ranks: dict, console: Console) -> None:
    """Print the ``ranks`` section: communication vs compute per (rank, device), then each
    step's ranks by work, slowest first (times in ns in the data, scaled here)."""
    c = console
    c.rule("ranks")
    if ranks["communication"]:
        t = DataTable(
            "rank",
            "device",
            "comm kernels",
            "comm time",
            "comm busy",
            "compute busy",
            "overlap",
            "overlap %",
            "exposed comm",
            title="communication vs compute per rank",
        )
        for r in ranks["communication"]:
            t.add_row(
                str(r["rank"]),
                str(r["device"]),
                f"{r['communication_count']:,}",
                fmt_ns(r["communication_ns"]),
                fmt_ns(r["communication_busy_ns"]),
                fmt_ns(r["compute_busy_ns"]),
                fmt_ns(r["overlap_ns"]),
                fmt_pct(r["overlap_pct"]),
                fmt_ns(r["exposed_communication_ns"]),
            )
        c.print(t)
    else:
        c.print("communication vs compute per rank: no GPU kernels in the traces (it needs CUDA activities)")
    if ranks["steps"]:
        t = DataTable(
            "step",
            "basis",
            "rank",
            "step time",
            "exposed comm",
            "work",
            "slowest (+ spread)",
            title="slowest rank per step (most work first)",
        )
        for s in ranks["steps"]:
            for i, r in enumerate(s["ranks"]):
                t.add_row(
                    str(s["step"]) if i == 0 else "",
                    s["basis"] if i == 0 else "",
                    str(r["rank"]),
                    fmt_ns(r["dur_ns"]),
                    fmt_ns(r["exposed_communication_ns"]),
                    fmt_ns(r["work_ns"]),
                    f"slowest, +{fmt_ns(s['spread_ns'])}" if r["rank"] == s["slowest_rank"] else "",
                )
        c.print(t)
    c.print(f"[dim]{RANKS_DEFINITIONS}[/dim]")
