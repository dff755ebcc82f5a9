"""Terminal rendering of the ``diff`` result with rich tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Column

from wanscope.analysis.diff import BASES
from wanscope.analysis.fused import KINDS
from wanscope.clitools import console as make_console
from wanscope.report.tables import DataTable, quoted, short_name
from wanscope.report.units import fmt_ns, fmt_pct

DEFINITIONS = (
    "Definitions: time = mean GPU time of a step when both traces have steps; mean CPU time of a step (its host "
    "range) when neither has GPU activity; else the window (first to last GPU activity); window, busy and kernel totals are summed over (rank, device); utilization = busy / window; "
    "% = share of summed kernel time; deltas of shares are in percentage points (pp)."
)
TIME_LABELS = {basis: f"time ({words})" for basis, words in BASES.items()}


def signed_ns(ns) -> str:
    """A duration change with its sign: ``+1.200 ms``, ``-350 ns``."""
    if ns is None:
        return "-"
    return ("+" if ns > 0 else "") + fmt_ns(ns)


def signed_count(n) -> str:
    return "-" if n is None else f"{n:+,}"


def signed_pp(pp) -> str:
    return "-" if pp is None else f"{pp:+.2f} pp"


def ops_text(kernel: dict) -> str:
    """A fused kernel's ops, unmatched tokens marked with ``?``."""
    if not kernel["ops"]:
        return "(no ops in the name)"
    return ", ".join(f"{op}?" if op in kernel["unmatched"] else op for op in kernel["ops"])


def render_diff(result: dict, console: Console | None = None) -> None:
    """Print the diff: the two traces, warnings, a summary of time, busy, utilization and
    launches, attention's share, time by category, kernels appeared, disappeared and
    changed, the ops whose self time changed most, the fused Triton kernels and the eager ops they replaced."""
    c = console or make_console()
    base, new = result["base"], result["new"]
    c.print(f"[bold]BASE:[/bold] {quoted(base['label'])}\n[bold]NEW:[/bold]  {quoted(new['label'])}")
    for w in result["warnings"]:
        c.print(f"[yellow]warning: {quoted(w)}[/yellow]")
    d = result["delta"]
    t = DataTable("", "BASE", "NEW", "change", title="summary")
    change = signed_ns(d["time_ns"])
    if d["time_change_pct"] is not None:
        change += f" ({d['time_change_pct']:+.2f}%)"
    t.add_row(TIME_LABELS[result["time_basis"]], fmt_ns(base["time_ns"]), fmt_ns(new["time_ns"]), change)
    count = {"step": "steps", "cpu_step": "cpu_steps"}.get(result["time_basis"])
    if count:
        t.add_row("steps", str(base[count]), str(new[count]), signed_count(new[count] - base[count]))
    t.add_row(
        "window", fmt_ns(base["window_ns"]), fmt_ns(new["window_ns"]), signed_ns(new["window_ns"] - base["window_ns"])
    )
    t.add_row("busy", fmt_ns(base["busy_ns"]), fmt_ns(new["busy_ns"]), signed_ns(d["busy_ns"]))
    t.add_row(
        "utilization",
        fmt_pct(base["utilization_pct"]),
        fmt_pct(new["utilization_pct"]),
        signed_pp(d["utilization_pct"]),
    )
    t.add_row(
        "kernel launches", f"{base['kernel_count']:,}", f"{new['kernel_count']:,}", signed_count(d["kernel_count"])
    )
    t.add_row(
        "kernel time (summed)",
        fmt_ns(base["kernel_time_ns"]),
        fmt_ns(new["kernel_time_ns"]),
        signed_ns(d["kernel_time_ns"]),
    )
    t.add_row(
        "memory ops",
        f"{base['memop_count']:,} ({fmt_ns(base['memop_time_ns'])})",
        f"{new['memop_count']:,} ({fmt_ns(new['memop_time_ns'])})",
        signed_ns(new["memop_time_ns"] - base["memop_time_ns"]),
    )
    c.print(t)
    if not result["categories"]:  # no GPU activity on either side: no shares, categories or kernels
        c.print("kernels and time by category: no GPU activity in either trace")
    else:
        _render_kernels(result, c)

    _render_ops(result["ops"], c)
    for side in ("base", "new"):
        fused = [f for f in result["fused_kernels"] if f["trace"] == side]
        if not fused:
            continue
        t = DataTable(
            Column("kernel", overflow="fold"),
            "kind",
            Column("ops", overflow="fold"),
            "launches",
            "total",
            "mean",
            "%",
            title=f"fused Triton kernels in {side.upper()} (op? = not an op name)",
        )
        for f in fused:
            name = f["name"] if f["ops_from"] != "launch_range" else f"{f['name']}\n(launched as {f['launched_as']})"
            t.add_row(
                name,
                KINDS.get(f["kind"], "-"),
                ops_text(f),
                f"{f['count']:,}",
                fmt_ns(f["total_ns"]),
                fmt_ns(f["mean_ns"]),
                fmt_pct(f["pct"]),
            )
        c.print(t)
        other = "BASE" if side == "new" else "NEW"
        t = DataTable(
            "op",
            f"aten calls in {other}",
            f"aten calls in {side.upper()}",
            Column("fused into", overflow="fold"),
            "launches",
            "total",
            title=f"ops fused in {side.upper()} (ops named in its fused kernels)",
        )
        for r in (r for r in result["fused_ops"] if r["trace"] == side):
            t.add_row(
                r["op"],
                f"{r['eager_calls']:,}",
                f"{r['compiled_calls']:,}",
                "\n".join(r["kernels"]),
                f"{r['launches']:,}",
                fmt_ns(r["total_ns"]),
            )
        c.print(t)
    for note in result["notes"]:
        c.print(f"[dim]{quoted(note)}[/dim]")
    c.print(f"[dim]{DEFINITIONS}[/dim]")


def _render_ops(ops: dict, c: Console) -> None:
    """The aten ops and Python frames whose self time changed most."""
    if not ops["top_changes"]:
        c.print("ops: neither trace recorded aten ops or Python frames on the host")
        return
    t = DataTable(
        Column("op or Python frame", overflow="fold"),
        "kind",
        "calls",
        "self BASE",
        "self NEW",
        "change",
        "kernels",
        title=f"ops by change in self time ({ops['common']:,} in both, {ops['appeared']:,} only in NEW, "
        f"{ops['disappeared']:,} only in BASE)",
    )
    for r in ops["top_changes"]:
        t.add_row(
            short_name(r["name"]),
            r["kind"],
            f"{r['base_count']:,} -> {r['new_count']:,}",
            fmt_ns(r["base_self_ns"]),
            fmt_ns(r["new_self_ns"]),
            signed_ns(r["delta_self_ns"]),
            f"{r['base_kernels']:,} -> {r['new_kernels']:,}",
        )
    c.print(t)


def _render_kernels(result: dict, c: Console) -> None:
    """Attention's share, time by category, kernels appeared and disappeared (a line, not
    an empty table, when there are none) and the largest changes."""
    a = result["attention"]
    c.print(
        f"[bold]attention share of kernel time: {fmt_pct(a['base_pct'])} -> {fmt_pct(a['new_pct'])}[/bold] "
        f"({signed_pp(a['delta_pct'])})"
    )

    t = DataTable("category", "BASE", "NEW", "change", "BASE %", "NEW %", "change", title="time by category")
    for r in result["categories"]:
        t.add_row(
            r["category"],
            fmt_ns(r["base_ns"]),
            fmt_ns(r["new_ns"]),
            signed_ns(r["delta_ns"]),
            fmt_pct(r["base_pct"]),
            fmt_pct(r["new_pct"]),
            signed_pp(r["delta_pct"]),
        )
    c.print(t)

    k = result["kernels"]
    for key, title in (("appeared", "kernels only in NEW"), ("disappeared", "kernels only in BASE")):
        group = k[key]
        if not group["names"]:
            c.print(f"{title}: none")
            continue
        t = DataTable(
            Column("kernel", overflow="fold"),
            "category",
            "launches",
            "total",
            "%",
            title=f"{title}: {group['names']:,} names, {group['count']:,} launches, {fmt_ns(group['total_ns'])}",
        )
        for r in group["top"]:
            t.add_row(short_name(r["name"]), r["category"], f"{r['count']:,}", fmt_ns(r["total_ns"]), fmt_pct(r["pct"]))
        c.print(t)
    if k["top_changes"]:
        t = DataTable(
            Column("kernel", overflow="fold"),
            "category",
            "BASE",
            "NEW",
            "change",
            title=f"top changes by time ({k['common']:,} kernel names in both)",
        )
        for r in k["top_changes"]:
            t.add_row(
                short_name(r["name"]),
                r["category"],
                f"{fmt_ns(r['base_ns'])} ×{r['base_count']:,}",
                f"{fmt_ns(r['new_ns'])} ×{r['new_count']:,}",
                signed_ns(r["delta_ns"]),
            )
        c.print(t)
