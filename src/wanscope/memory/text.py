"""The memory document in the terminal: per device, the moment (the failed allocation or the
peak), its totals, and the stack groups live there, largest first."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from wanscope.memory.analysis import frame_text, library_frame
from wanscope.report.tables import DataTable
from wanscope.report.units import fmt_bytes, fmt_ns, fmt_pct

FRAMES_SHOWN = 3  # frames outside the libraries shown per group, innermost first


def _user_frames(stack: list[dict], limit: int = FRAMES_SHOWN) -> list[str]:
    """The stack's frames outside torch and Python's own, innermost first (its innermost
    frame where it has none of those)."""
    mine = [f for f in stack if not library_frame(f["filename"])] or stack[:1]
    lines = [frame_text(f) for f in mine[:limit]]
    if len(mine) > limit:
        lines.append(f"... {len(mine) - limit} outer frames")
    return lines


def _when(d: dict) -> str:
    at = d["at"]
    if at["index"] is None:
        return "no trace events" if at["kind"] == "dump" else "before the trace's first event"
    after = "" if at["time_ns"] is None else f", {fmt_ns(at['time_ns'])} after the first"
    return f"event {at['index']:,} of {d['trace']['events']:,}{after}"


def render_memory(doc: dict, console: Console, top_frames: int = FRAMES_SHOWN) -> None:
    """Print ``doc`` (``analyze_snapshot``'s, with ``snapshot``: the file)."""
    c = console
    if doc.get("snapshot"):
        c.print(f"[bold]memory snapshot[/bold] {escape(doc['snapshot'])}", highlight=False)
    for d in doc["devices"]:
        oom = d["oom"]
        kind = d["at"]["kind"]
        if oom is not None:
            stream = "" if oom["stream"] is None else f" on stream {oom['stream']}"
            c.print(
                f"[bold]device {d['device']}: out of memory[/bold] - the failed allocation asked for "
                f"[bold]{fmt_bytes(oom['size_bytes'])}[/bold]{stream}, with {fmt_bytes(oom['device_free_bytes'])} "
                "free on the device",
                highlight=False,
            )
            lines = _user_frames(oom["stack"], top_frames) if oom["stack"] else [oom["where"]]
            for i, line in enumerate(lines):
                c.print(f"  {'at ' if i == 0 else '   '}{escape(line)}", highlight=False)
            what = "at the failed allocation"
        else:
            what = {"peak": "at the peak of allocated memory", "dump": "at the dump"}[kind]
            c.print(f"[bold]device {d['device']}[/bold]: {what}", highlight=False)
        pending = f" (+ {fmt_bytes(d['pending_free_bytes'])} pending free)" if d["pending_free_bytes"] else ""
        c.print(
            f"{what} ({_when(d)}): allocated {fmt_bytes(d['allocated_bytes'])} in {d['allocations']:,} "
            f"allocation{'' if d['allocations'] == 1 else 's'}{pending} · reserved {fmt_bytes(d['reserved_bytes'])} · reserved but unused "
            f"{fmt_bytes(d['reserved_unused_bytes'])} ({fmt_pct(d['reserved_unused_pct'])})",
            highlight=False,
        )
        if kind != "dump":
            c.print(
                f"peak allocated {fmt_bytes(d['peak_allocated_bytes'])} · peak reserved "
                f"{fmt_bytes(d['peak_reserved_bytes'])} · {d['trace']['events']:,} events",
                highlight=False,
            )
        t = DataTable(
            "bytes",
            "share",
            "allocations",
            "where: the innermost frame outside torch, then its callers",
            title=f"device {d['device']}: live allocations by stack, {what}",
        )
        for g in d["groups"]:
            where = _user_frames(g["stack"], top_frames) if g["stack"] else [g["where"]]
            t.add_row(fmt_bytes(g["bytes"]), fmt_pct(g["pct"]), f"{g['allocations']:,}", escape("\n".join(where)))
        other = d["other"]
        if other["groups"]:
            share = 100.0 * other["bytes"] / d["allocated_bytes"] if d["allocated_bytes"] > 0 else None
            t.add_row(
                fmt_bytes(other["bytes"]),
                fmt_pct(share),
                f"{other['allocations']:,}",
                f"({other['groups']:,} other stacks)",
            )
        c.print(t)
    for note in doc["notes"]:
        c.print(f"note: {escape(note)}", highlight=False)
