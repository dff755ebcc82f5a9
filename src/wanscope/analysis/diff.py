"""``diff``: what changed between two traces (eager vs compiled, before vs after a fix).

Each trace is analyzed on its own connection with the same functions as ``analyze``, so
every number on one side equals what ``analyze`` reports for that trace. Definitions:

- Totals (window, busy, kernel and memory-op counts and times, category times) are summed
  over the trace's (rank, device) pairs; with one device they are ``analyze``'s numbers.
  ``utilization_pct`` = busy / window of those sums.
- ``time_ns``, the time compared: the mean GPU time of a step (first to last GPU work
  launched inside the step's range) when both traces have steps with GPU work; when neither
  trace has GPU activity (CPU runs) but both have steps, the mean CPU time of a step (its
  host range); else each trace's window (the longest (rank, device) window). ``time_basis``
  says which (``BASES``).
- Shares (``*_pct``) are shares of summed kernel time, as in ``analyze``; memory
  operations are categories of their own with ``pct`` None. Share deltas are in
  percentage points; ``time_change_pct`` is relative (positive = NEW slower).
- Attention's share is the ``attention`` category's (a Triton kernel named after an
  attention op is a fused kernel, not attention: docs/design.md, "Categories").
- Kernels appeared / disappeared / changed are matched by ``name_norm`` over the whole trace
  (one spelling whichever tool demangled them: ``trace/names.py``), each listed by its name as
  BASE recorded it (NEW's where BASE has none).
- Ops: the aten ops and Python frames of each trace over all threads, inside the steps when
  both traces have steps (else over the whole traces), with count, self time and the kernels
  each launched (``analysis.host.op_totals``); matched by kind and name, then those left by a
  Python frame's name without its line number and object addresses (``frame_key``) where that
  names one frame on each side, so that edited code still matches; the largest changes in
  self time first.
"""

from __future__ import annotations

import re

from wanscope.analysis.categories import categorize
from wanscope.analysis.fused import OPS_PARTIAL_NOTE, aten_calls, fused_kernels, ops_summary
from wanscope.analysis.host import op_totals
from wanscope.analysis.kernels import categories
from wanscope.analysis.scope import Scope
from wanscope.analysis.steps import step_times
from wanscope.analysis.summary import sources, warnings
from wanscope.analysis.utilization import device_utilization

SCHEMA_VERSION = 2
SIDES = ("base", "new")
# time_basis -> what ``time_ns`` is
BASES = {"step": "mean step GPU time", "cpu_step": "mean step CPU time", "window": "window"}
_SUMMED = ("window_ns", "busy_ns", "kernel_count", "kernel_time_ns", "memop_count", "memop_time_ns")


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 4) if whole else None


def _delta(a, b):
    return None if a is None or b is None else round(b - a, 4)


def trace_totals(con, label: str) -> dict:
    """One trace's side of the diff.

    Returns a dict: ``label``, ``sources``, ``ingest_warnings``, ``devices`` (count),
    ``steps`` (steps with GPU work), ``mean_step_ns`` (None without such steps),
    ``cpu_steps`` (every step), ``mean_step_cpu_ns`` (mean host range; None without steps),
    ``longest_window_ns``, the sums of ``_SUMMED`` (ns and counts), ``utilization_pct``,
    and, not part of the JSON, ``_categories`` (category -> [count, total_ns, is_kernel])
    and ``_kernels`` (name -> [count, total_ns]).
    """
    scope = Scope()
    devices = device_utilization(con, scope)
    all_steps = step_times(con, scope)
    steps = [s["gpu_dur_ns"] for s in all_steps if s["gpu_dur_ns"] is not None]
    cpu = [s["cpu_dur_ns"] for s in all_steps]
    out = {
        "label": label,
        "sources": sources(con),
        "ingest_warnings": warnings(con),
        "devices": len(devices),
        "steps": len(steps),
        "mean_step_ns": round(sum(steps) / len(steps)) if steps else None,
        "cpu_steps": len(cpu),
        "mean_step_cpu_ns": round(sum(cpu) / len(cpu)) if cpu else None,
        "longest_window_ns": max((d["window_ns"] for d in devices), default=None),
    }
    for field in _SUMMED:
        out[field] = sum(d[field] for d in devices)
    out["utilization_pct"] = _pct(out["busy_ns"], out["window_ns"])
    cats: dict[str, list] = {}
    for rows in categories(con, scope).values():
        for r in rows:
            acc = cats.setdefault(r["category"], [0, 0, r["pct"] is not None])
            acc[0] += r["count"]
            acc[1] += r["total_ns"]
    out["_categories"] = cats
    out["_kernels"] = {  # by name_norm: [count, total_ns, a name as recorded]
        norm: [int(n), int(t), name]
        for norm, n, t, name in con.execute(
            "SELECT name_norm, count(*), sum(dur_ns), min(name) FROM kernels GROUP BY name_norm"
        ).fetchall()
    }
    return out


def _category_rows(base: dict, new: dict) -> list[dict]:
    """Kernel categories first, then memory operations; each by the larger side's time."""
    keyed = []
    for category in set(base["_categories"]) | set(new["_categories"]):
        b = base["_categories"].get(category)
        n = new["_categories"].get(category)
        is_kernel = (b or n)[2]
        b, n = b or [0, 0, is_kernel], n or [0, 0, is_kernel]
        bp = _pct(b[1], base["kernel_time_ns"]) if is_kernel else None
        np_ = _pct(n[1], new["kernel_time_ns"]) if is_kernel else None
        row = {
            "category": category,
            "base_count": b[0],
            "new_count": n[0],
            "base_ns": b[1],
            "new_ns": n[1],
            "delta_ns": n[1] - b[1],
            "base_pct": bp,
            "new_pct": np_,
            "delta_pct": _delta(bp, np_),
        }
        keyed.append(((not is_kernel, -max(b[1], n[1]), category), row))
    return [row for _, row in sorted(keyed, key=lambda kr: kr[0])]


def _kernel_changes(base: dict, new: dict, top: int) -> dict:
    bk, nk = base["_kernels"], new["_kernels"]

    def side_rows(names, kernels, kernel_time):
        rows = [
            {
                "name": kernels[k][2],
                "category": categorize(kernels[k][2]),
                "count": kernels[k][0],
                "total_ns": kernels[k][1],
                "pct": _pct(kernels[k][1], kernel_time),
            }
            for k in names
        ]
        rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
        return {
            "names": len(rows),
            "count": sum(r["count"] for r in rows),
            "total_ns": sum(r["total_ns"] for r in rows),
            "top": rows[:top],
        }

    changes = []
    for k in set(bk) | set(nk):
        b, n = bk.get(k, [0, 0, None]), nk.get(k, [0, 0, None])
        name = b[2] or n[2]  # as BASE recorded it, else NEW
        changes.append(
            {
                "name": name,
                "category": categorize(name),
                "base_count": b[0],
                "new_count": n[0],
                "base_ns": b[1],
                "new_ns": n[1],
                "delta_ns": n[1] - b[1],
            }
        )
    changes.sort(key=lambda r: (-abs(r["delta_ns"]), r["name"]))
    return {
        "common": len(set(bk) & set(nk)),
        "appeared": side_rows(set(nk) - set(bk), nk, new["kernel_time_ns"]),
        "disappeared": side_rows(set(bk) - set(nk), bk, base["kernel_time_ns"]),
        "top_changes": changes[:top],
    }


_LINE = re.compile(r"\(\d+\)(?=: )")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def frame_key(kind: str, name: str) -> str:
    """The name ops are matched by across traces: a Python frame's without its line number
    (``m.py(12): f`` -> ``m.py: f``) and object addresses (``<built-in method x of y at 0x7f..>``),
    which move when code is edited or rerun; an aten op's as recorded."""
    if kind != "python":
        return name
    return _ADDRESS.sub("", _LINE.sub("", name, count=1))


def _op_changes(base_con, new_con, top: int) -> dict:
    """Aten ops and Python frames matched by kind and name, then, among those left, by kind and
    ``frame_key`` where that key names one row on each side; largest change in self time first.
    Over the steps when both traces have steps, else over the whole traces."""
    with_steps = all(con.execute("SELECT count(*) FROM steps").fetchall()[0][0] for con in (base_con, new_con))
    sides = [{(r["kind"], r["name"]): r for r in op_totals(con, steps=with_steps)} for con in (base_con, new_con)]
    pairs = [(k, k) for k in sides[0].keys() & sides[1].keys()]
    left = [sorted(side.keys() - sides[1 - i].keys()) for i, side in enumerate(sides)]
    by_key = [{} for _ in sides]
    for i, keys in enumerate(left):
        for kind, name in keys:
            by_key[i].setdefault((kind, frame_key(kind, name)), []).append((kind, name))
    matched = set()
    for key, base_keys in by_key[0].items():
        new_keys = by_key[1].get(key, [])
        if len(base_keys) == 1 and len(new_keys) == 1:
            pairs.append((base_keys[0], new_keys[0]))
            matched.update((base_keys[0], new_keys[0]))
    pairs += [(k, None) for k in left[0] if k not in matched] + [(None, k) for k in left[1] if k not in matched]
    zero = {"count": 0, "self_ns": 0, "kernels": 0, "kernel_ns": 0}
    rows = []
    for b, n in pairs:
        x, y = sides[0].get(b, zero) if b else zero, sides[1].get(n, zero) if n else zero
        row = {"kind": (b or n)[0], "name": (b or n)[1]}
        for f in ("count", "self_ns", "kernels", "kernel_ns"):
            row[f"base_{f}"], row[f"new_{f}"] = x[f], y[f]
        row["delta_self_ns"] = y["self_ns"] - x["self_ns"]
        rows.append(row)
    rows.sort(key=lambda r: (-abs(r["delta_self_ns"]), r["kind"], r["name"]))
    return {
        "window": "steps" if with_steps else "trace",
        "common": sum(1 for b, n in pairs if b and n),
        "appeared": sum(1 for b, _ in pairs if b is None),
        "disappeared": sum(1 for _, n in pairs if n is None),
        "top_changes": rows[:top],
    }


def _fused(base_con, new_con) -> tuple[list[dict], list[dict], list[str]]:
    """Both traces' fused kernels (each tagged with ``trace`` and the ``eager_ops`` the
    other trace ran as aten ops), the summary by op, and notes."""
    cons = {"base": base_con, "new": new_con}
    calls = {side: aten_calls(con) for side, con in cons.items()}
    fused, fused_ops = [], []
    for side, con in cons.items():
        other = "new" if side == "base" else "base"
        rows = fused_kernels(con, per_device=False).get((), [])
        for r in rows:
            r["trace"] = side
            r["eager_ops"] = [op for op in r["ops"] if calls[other].get(op)]
        fused += rows
        fused_ops += [{"trace": side, **r} for r in ops_summary(rows, calls[other], calls[side])]
    notes = [OPS_PARTIAL_NOTE] if fused else []
    if fused and not any(calls.values()):
        notes.append("neither trace recorded aten ops on the host, so fused ops cannot be matched to eager ops")
    return fused, fused_ops, notes


def diff(base_con, new_con, base_label: str = "BASE", new_label: str = "NEW", top: int = 10) -> dict:
    """Compare two ingested traces.

    Args:
        base_con, new_con: DuckDB connections with the canonical tables, one per trace
            (``wanscope.trace.open_traces``).
        base_label, new_label: how the traces are named in the result (their paths).
        top: kernels listed under appeared, disappeared and top changes.

    Returns:
        A dict: ``schema_version``, ``base`` and ``new`` (each trace's totals, see
        :func:`trace_totals`, plus ``time_ns``), ``time_basis`` (``step``, ``cpu_step`` or
        ``window``: ``BASES``),
        ``delta``, ``attention`` (``base_pct``, ``new_pct``, ``delta_pct``), ``categories``,
        ``kernels``, ``ops`` (aten ops and Python frames: ``_op_changes``), ``fused_kernels``, ``fused_ops``, ``warnings`` and ``notes`` (plain
        sentences). docs/json.md documents each field ("diff JSON").
    """
    sides = {"base": trace_totals(base_con, base_label), "new": trace_totals(new_con, new_label)}
    base, new = sides["base"], sides["new"]
    warn = []
    for side, t in sides.items():
        if not t["devices"]:
            warn.append(f"{side.upper()} ({t['label']}) has no GPU activity: its GPU times and shares are empty")
    if base["steps"] and new["steps"]:
        basis = "step"
    elif not base["devices"] and not new["devices"] and base["cpu_steps"] and new["cpu_steps"]:
        basis = "cpu_step"
    else:
        basis = "window"
    key = {"step": "mean_step_ns", "cpu_step": "mean_step_cpu_ns", "window": "longest_window_ns"}[basis]
    for t in sides.values():
        t["time_ns"] = t[key]
    if basis == "cpu_step":
        warn.append(
            "neither trace has GPU activity: the time compared is the mean CPU time of a step "
            "(its host range), not GPU time"
        )
    if basis == "window" and (base["steps"] or new["steps"]):
        with_steps = "BASE" if base["steps"] else "NEW"
        warn.append(f"only {with_steps} has steps with GPU work: times compared are whole windows")
    count = "cpu_steps" if basis == "cpu_step" else "steps"
    if basis != "window" and base[count] != new[count]:
        warn.append(
            f"BASE has {base[count]} steps and NEW {new[count]}: totals differ for that reason too; "
            "compare the per-step time and the shares"
        )
    kernels = _kernel_changes(base, new, top)
    if base["_kernels"] and new["_kernels"] and not kernels["common"]:
        warn.append(
            "BASE and NEW share no kernel names: they may be different workloads; totals and shares still compare"
        )
    cats = _category_rows(base, new)
    attention = next((c for c in cats if c["category"] == "attention"), {})
    shares = {f"{s}_pct": attention.get(f"{s}_pct", 0.0) if sides[s]["kernel_time_ns"] else None for s in SIDES}
    shares["delta_pct"] = _delta(shares["base_pct"], shares["new_pct"])

    fused, fused_ops, notes = _fused(base_con, new_con)

    def change_pct(a, b):
        return round(100.0 * (b - a) / a, 4) if a and b is not None else None

    public = {s: {k: v for k, v in t.items() if not k.startswith("_")} for s, t in sides.items()}
    return {
        "schema_version": SCHEMA_VERSION,
        **public,
        "time_basis": basis,
        "delta": {
            "time_ns": None if base["time_ns"] is None or new["time_ns"] is None else new["time_ns"] - base["time_ns"],
            "time_change_pct": change_pct(base["time_ns"], new["time_ns"]),
            "busy_ns": new["busy_ns"] - base["busy_ns"],
            "utilization_pct": _delta(base["utilization_pct"], new["utilization_pct"]),
            "kernel_count": new["kernel_count"] - base["kernel_count"],
            "kernel_time_ns": new["kernel_time_ns"] - base["kernel_time_ns"],
        },
        "attention": shares,
        "categories": cats,
        "kernels": kernels,
        "ops": _op_changes(base_con, new_con, top),
        "fused_kernels": fused,
        "fused_ops": fused_ops,
        "warnings": warn,
        "notes": notes,
    }
