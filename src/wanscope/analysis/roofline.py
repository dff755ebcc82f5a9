"""Rooflines: each op call with recorded shapes against its GPU's peaks, per (rank, device).

Definitions (docs/design.md, "Rooflines"):

- Counted op: an op in the window (``host.HostRanges``) whose name and recorded arguments
  ``flops.count`` can count.
- An op's GPU time: the summed duration of the kernels launched by API calls that lie inside its
  time range on its thread, each kernel given to the outermost counted op enclosing its launch,
  so that ``aten::linear`` takes its ``aten::addmm``'s GEMM and the copies it makes, and no
  kernel counts twice. Containment is by time among the counted ops themselves (dispatcher ops
  nest on their thread), not through the Python frames between them: a frame torch.profiler
  left open to the end of the trace (it does so for some built-in methods) overlaps the ops it
  called without enclosing them. Kernels under no counted op are ``uncounted``, listed by the
  innermost op enclosing their launch in ``HostRanges``' nesting (``(no op)`` for none).
- Rows group the calls of one op with the same recorded arguments (name, ``input_dims``,
  ``input_types``, ``concrete_inputs``) on one device: ``count`` calls, their FLOPs and bytes
  (``flops.Count`` times ``count``), ``gpu_ns``.
- Roofline (Williams, Waterman & Patterson 2009, "Roofline: an insightful visual performance model
  for multicore architectures", CACM 52(4)): at arithmetic intensity I = FLOPs / bytes the
  attainable rate is min(P, I x B), P the compute peak and B the DRAM bandwidth. With FLOPs on
  several peaks (``Count.flops``), the time at the roof is max(sum_u F_u / P_u, bytes / B), and
  P the FLOPs over the compute part of it. Achieved rate: FLOPs / ``gpu_ns``; the fraction of the
  roof: time at the roof / ``gpu_ns``; time lost: ``gpu_ns`` - time at the roof. A unit without a
  peak limits nothing, except that a row whose main unit (the most FLOPs) has none, or a device
  without a bandwidth, has no roof (its roof fields None).
- Rows are sorted by time lost, most first (rows without a roof last): the ops whose time is
  furthest above what the roof allows, weighted by their time so that short ops do not lead.
- Category: the kernel category (``categories``) holding most of a row's GPU time; per category,
  the kernel time of that category launched in the window (``kernel_ns``), the part under a
  counted op (``counted_ns``), and the counted rows of that category summed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from wanscope.analysis import flops as flops_mod
from wanscope.analysis.categories import OTHER, sql_case
from wanscope.analysis.host_ranges import KINDS, HostRanges, host_ranges
from wanscope.analysis.launches import groups
from wanscope.analysis.peaks import Peaks, device_peaks
from wanscope.analysis.scope import Scope
from wanscope.trace.link import memory_limit
from wanscope.trace.load import NEST_MEMORY_LIMIT

# The calls of known ops grouped by recorded arguments, with their scan rows: one pass over the
# strings (a hash of them per row, then the distinct ones, took twice as long); their times apart
_SIGNATURES_SQL = """
SELECT name, input_dims, input_types, concrete_inputs, list(rowid)
FROM cpu_ops WHERE kind = 'op' AND name IN ({names}) GROUP BY ALL
"""
# each kernel with its launching API call's scan row; the kernels' category codes and the calls'
# times apart (one join carrying them all took more memory)
_KERNELS_SQL = """
SELECT a.rowid AS i, k.rowid AS kr, k.device, k.dur_ns AS ns
FROM api_calls a JOIN kernels k ON k.rank = a.rank AND k.pid = a.pid AND k.correlation = a.correlation
WHERE a.correlation IS NOT NULL
"""
_CODES_SQL = "SELECT k.rowid AS kr, n.code FROM kernels k JOIN _roofline_names n ON n.name IS NOT DISTINCT FROM k.name"
_CALLS_SQL = "SELECT rowid AS i, rank, start_ns, end_ns FROM api_calls"
# every op's times (a filter on the name too took three times as long)
_TIMES_SQL = "SELECT rowid AS r, start_ns, end_ns FROM cpu_ops WHERE kind = 'op'"
_NAMES_SQL = "SELECT c.id, c.name FROM cpu_ops c SEMI JOIN (SELECT unnest($ids) AS i) x ON c.id = x.i"
_SHAPES_SQL = "SELECT count(*) FROM (SELECT 1 FROM cpu_ops WHERE input_dims IS NOT NULL LIMIT 1)"
NO_OP = "(no op)"
UNCOUNTED_NOTE_PCT = 1  # a note names the uncounted ops where they hold at least this % of kernel time


@dataclass
class Inputs:
    """What the rooflines read from the tables, before the host ranges are nested (DuckDB then
    has its full memory; under the nesting's limit these queries took several times as long).

    Attributes:
        shapes: whether any op has recorded shapes.
        counts, signature: per counted (op, recorded arguments): its ``flops.Count`` and
            (name, ``input_dims`` text).
        rows, sig, start, end: int64 [counted calls]: each call's ``cpu_ops`` scan row, its index
            in ``counts``, its start and end (ns).
        kernels: per kernel launched by an API call (``_kernels``).
        devices: (rank, device) -> (name, ``memory_bandwidth_gbps``) from ``devices``.
    """

    shapes: bool
    counts: list
    signature: list
    rows: np.ndarray
    sig: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kernels: dict
    devices: dict


def inputs(con) -> Inputs:
    """The tables' part of the rooflines (``Inputs``); call it before ``host.host_ranges``."""
    shapes = bool(con.execute(_SHAPES_SQL).fetchone()[0])
    counts: list[flops_mod.Count] = []
    signature: list[tuple[str, str]] = []
    rows, sig = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    start = end = np.zeros(0, np.int64)
    if shapes:
        names = ", ".join("'" + name.replace("'", "''") + "'" for name in flops_mod.op_names())
        for name, dims, types, concrete, at in con.execute(_SIGNATURES_SQL.format(names=names)).fetchall():
            c = flops_mod.count(name, dims, types, concrete)
            if c is None:
                continue
            rows.append(np.asarray(at, np.int64))
            sig.append(np.full(len(at), len(counts), np.int64))
            counts.append(c)
            signature.append((name, dims))
    rows, sig = np.concatenate(rows), np.concatenate(sig)
    if len(rows):
        times = con.execute(_TIMES_SQL).fetchnumpy()
        by_row = np.zeros((2, int(np.max(times["r"])) + 1), np.int64)
        by_row[:, np.asarray(times["r"], np.int64)] = times["start_ns"], times["end_ns"]
        start, end = by_row[0][rows], by_row[1][rows]
        del times, by_row
    devices = {(r, d): (name, bw) for r, d, name, bw in con.execute(_DEVICES_SQL).fetchall()}
    return Inputs(shapes, counts, signature, rows, sig, start, end, _kernels(con), devices)


def roofline(
    con,
    scope: Scope | None = None,
    top: int = 10,
    peak_tflops: float | None = None,
    peak_fp32_tflops: float | None = None,
    peak_bandwidth_gbps: float | None = None,
    ranges: HostRanges | None = None,
    read: Inputs | None = None,
) -> dict:
    """The rooflines of the trace in ``con``.

    Args:
        con: DuckDB connection with the canonical tables.
        scope: steps to restrict to (default: all of them, or the whole trace without steps).
        top: rows listed per device (ops by time lost, uncounted ops by time) before ``other``.
        peak_tflops, peak_fp32_tflops, peak_bandwidth_gbps: measured peaks replacing the
            table's (``peaks.device_peaks``).
        ranges, read: the window's host ranges (``host.host_ranges(con, scope)``) and
            ``inputs(con)``, where the caller has them (computed here otherwise).

    Returns:
        A dict (docs/json.md, "analyze JSON", ``roofline``): ``shapes_recorded`` (whether any
        op of the trace has recorded shapes) and ``devices``, one per (rank, device)
        that ran kernels launched in the window: ``rank``, ``device``, ``peaks``
        (``Peaks.as_dict``), ``kernel_ns``, ``counted_ns``, ``counted_pct``, ``ops`` (rows by
        time lost, then ``other``), ``categories`` and ``uncounted`` (``name``, ``kernels``,
        ``gpu_ns``, the ``top`` by time, then ``other``). Times in ns, FLOPs and bytes as
        counts, rates in TFLOP/s and GB/s, intensities in FLOP/byte.
    """
    scope = scope or Scope()
    read = read or inputs(con)
    overrides = (peak_tflops, peak_fp32_tflops, peak_bandwidth_gbps)
    if ranges is None:
        with memory_limit(con, NEST_MEMORY_LIMIT):
            return _roofline(con, host_ranges(con, scope), read, top, overrides)
    return _roofline(con, ranges, read, top, overrides)


def _roofline(con, ranges: HostRanges, read: Inputs, top: int, overrides: tuple) -> dict:
    n = len(ranges.cpu_parent)
    sig_of = np.full(n, -1, np.int64)  # by position: the op's index in ``counts``, -1 uncounted
    start, end = np.zeros(n, np.int64), np.zeros(n, np.int64)  # by position, of the counted ops
    keep = ranges.tables["cpu_ops"][2][read.rows]  # in the window
    at = ranges.position[read.rows[keep]]
    sig_of[at], start[at], end[at] = read.sig[keep], read.start[keep], read.end[keep]
    k = read.kernels
    window = ranges.tables["api_calls"][2][k["i"]] if len(k["i"]) else np.zeros(0, bool)
    kernels = {key: v[window] for key, v in k.items() if key != "cats"} | {"cats": k["cats"]}
    best = _outermost(ranges, sig_of >= 0, start, end, kernels)
    inner = _innermost_op(ranges, kernels["i"])
    devices = []
    names_of = _op_names(con, inner[(best < 0) & (inner >= 0)])
    for (rank, device), sel in groups(kernels["rank"], kernels["device"]):
        gpu, trace_bw = read.devices.get((rank, device), (None, None))
        peaks = device_peaks(gpu, trace_bw, *overrides)
        devices.append(
            _device(rank, device, peaks, kernels, sel, best, inner, sig_of, read.counts, read.signature, names_of, top)
        )
    return {"shapes_recorded": read.shapes, "devices": devices}


_DEVICES_SQL = "SELECT rank, device, any_value(name), any_value(memory_bandwidth_gbps) FROM devices GROUP BY ALL"


def _kernels(con) -> dict[str, np.ndarray]:
    """Per kernel launched by an API call: ``i`` (the call's scan row), ``rank``,
    ``call_start``, ``call_end`` (the call's, ns), ``device``, ``cat`` (index into ``cats``),
    ``kernels`` (1), ``ns`` (its duration); ``cats`` the category names."""
    names, of = [], []
    for name, category in con.execute(f"SELECT name, {sql_case()} FROM (SELECT DISTINCT name FROM kernels)").fetchall():
        names.append(name)
        of.append(category)
    cats = sorted(set(of) | {OTHER})
    code = {c: i for i, c in enumerate(cats)}
    con.register(
        "_roofline_names",
        {"name": np.array(names, dtype=object), "code": np.array([code[c] for c in of], np.int64)},
    )
    try:
        codes = con.execute(_CODES_SQL).fetchnumpy()
    finally:
        con.unregister("_roofline_names")
    got = con.execute(_KERNELS_SQL).fetchnumpy()
    calls = con.execute(_CALLS_SQL).fetchnumpy()
    by_kernel = np.zeros(int(np.max(codes["kr"], initial=-1)) + 1, np.int64)
    by_kernel[np.asarray(codes["kr"], np.int64)] = codes["code"]
    by_call = {}
    rows = np.asarray(calls["i"], np.int64)
    for key in ("rank", "start_ns", "end_ns"):
        by_call[key] = np.empty(len(rows), np.int64)
        by_call[key][rows] = calls[key]
    i = np.asarray(got["i"], np.int64)
    return {
        "i": i,
        "rank": by_call["rank"][i],
        "call_start": by_call["start_ns"][i],
        "call_end": by_call["end_ns"][i],
        "device": np.asarray(got["device"], np.int64),
        "cat": by_kernel[np.asarray(got["kr"], np.int64)],
        "ns": np.asarray(got["ns"], np.int64),
        "kernels": np.ones(len(i), np.int64),
        "cats": np.array(cats, dtype=object),
    }


def _outermost(
    ranges: HostRanges, counted: np.ndarray, start: np.ndarray, end: np.ndarray, kernels: dict
) -> np.ndarray:
    """For each kernel row: the position of the outermost counted op whose time range holds its
    launching API call on the call's thread (the thread of the range ``HostRanges`` puts the
    call in), -1 for none.

    Args:
        counted: bool [positions]; start, end: int64 [positions], ns (of the counted ones).
    """
    best = np.full(len(kernels["i"]), -1, np.int64)
    ops = np.flatnonzero(counted)  # in position order: by thread, then start, longer first
    if not len(ops) or not len(best):
        return best
    thread = ranges.thread
    op_thread = thread[ops]
    outer = np.ones(len(ops), bool)
    bounds = np.flatnonzero(np.diff(op_thread)) + 1
    for seg in np.split(np.arange(len(ops)), bounds):
        e = end[ops[seg]]
        before = np.maximum.accumulate(e)  # the latest end of the ops started before, or at, each
        outer[seg[1:]] = before[:-1] < e[1:]  # enclosed where an earlier one ends at or after it
    ops, op_thread = ops[outer], op_thread[outer]
    parent = ranges.api_parent[kernels["i"]]
    has = parent >= 0
    call_thread = np.where(has, thread[np.maximum(parent, 0)], -1)
    for t in np.unique(op_thread).tolist():
        mine = ops[op_thread == t]
        rows = np.flatnonzero(call_thread == t)
        if not len(rows):
            continue
        j = np.searchsorted(start[mine], kernels["call_start"][rows], "right") - 1
        ok = j >= 0
        j = np.maximum(j, 0)
        ok &= kernels["call_end"][rows] <= end[mine][j]
        best[rows[ok]] = mine[j[ok]]
    return best


def _innermost_op(ranges: HostRanges, calls: np.ndarray) -> np.ndarray:
    """For each API call (scan rows ``calls``): its innermost enclosing range of kind ``op`` in
    ``HostRanges``' nesting (a position), -1 for none; one vectorized step per level."""
    parent = ranges.cpu_parent
    is_op = ranges.kind == KINDS.index("op")
    at = ranges.api_parent[calls].astype(np.int64)
    inner = np.full(len(calls), -1, np.int64)
    live = np.flatnonzero(at >= 0)
    while len(live):
        p = at[live]
        hit = is_op[p]
        inner[live[hit]] = p[hit]
        live = live[~hit]
        nxt = parent[p[~hit]]
        at[live] = nxt
        live = live[nxt >= 0]
    return inner


def _op_names(con, positions: np.ndarray) -> dict[int, str]:
    """position -> name of the ``cpu_ops`` rows at ``positions``."""
    positions = np.unique(positions)
    if not len(positions):
        return {}
    got = con.execute(_NAMES_SQL, {"ids": positions.tolist()}).fetchall()  # a position is its id
    return {int(i): name for i, name in got}


def time_at_roof(flops: dict[str, float], nbytes: float, peaks: Peaks) -> tuple[float, str] | None:
    """(ns at the roof, ``compute`` or ``memory``) for ``flops`` (unit -> FLOPs) moving ``nbytes``
    bytes; None where the main unit (the most FLOPs) has no peak or the bandwidth is unknown
    (module docstring)."""
    if peaks.bandwidth_gbps is None:
        return None
    live = {u: f for u, f in flops.items() if f > 0}
    if live:
        main = max(live, key=lambda u: (live[u], u))
        if main not in peaks.tflops:
            return None
    compute = sum(f / (peaks.tflops[u] * 1e3) for u, f in live.items() if u in peaks.tflops)  # TFLOP/s = 1e3 FLOP/ns
    memory = nbytes / peaks.bandwidth_gbps  # GB/s = bytes/ns
    return (compute, "compute") if compute >= memory else (memory, "memory")


def roof_fields(flops: dict[str, float], nbytes: float, gpu_ns: float, peaks: Peaks) -> dict:
    """A row's rates and roof: ``flops``, ``bytes``, ``gpu_ns``, ``achieved_tflops``,
    ``achieved_gbps``, ``intensity`` (FLOP/byte), ``peak_tflops`` (the compute peak of the row's
    FLOP mix), ``roof_tflops`` (min(peak, intensity x bandwidth)), ``bound``, ``time_at_roof_ns``,
    ``roof_pct`` (% of the roof achieved) and ``lost_ns``; the roof fields None without a roof."""
    total = sum(flops.values())
    out = {
        "flops": round(total),
        "bytes": round(nbytes),
        "gpu_ns": int(gpu_ns),
        "achieved_tflops": total / gpu_ns / 1e3 if gpu_ns else None,
        "achieved_gbps": nbytes / gpu_ns if gpu_ns else None,
        "intensity": total / nbytes if nbytes else None,
        "peak_tflops": None,
        "roof_tflops": None,
        "bound": None,
        "time_at_roof_ns": None,
        "roof_pct": None,
        "lost_ns": None,
    }
    roof = time_at_roof(flops, nbytes, peaks)
    if roof is None:
        return out
    t, bound = roof
    compute = sum(f / (peaks.tflops[u] * 1e3) for u, f in flops.items() if f > 0 and u in peaks.tflops)
    out["peak_tflops"] = total / compute / 1e3 if compute else None
    out["roof_tflops"] = total / t / 1e3 if t else None
    out["bound"] = bound
    out["time_at_roof_ns"] = round(t)
    out["roof_pct"] = 100 * t / gpu_ns if gpu_ns else None
    out["lost_ns"] = round(gpu_ns - t)
    return out


def _device(rank, device, peaks, kernels, sel, best, inner, sig_of, counts, signature, names_of, top) -> dict:
    cats = kernels["cats"]
    ns, cat, nk = kernels["ns"][sel], kernels["cat"][sel], kernels["kernels"][sel]
    b, inn = best[sel], inner[sel]
    counted = b >= 0
    kernel_ns, counted_ns = int(ns.sum()), int(ns[counted].sum())
    rows = []
    c_b, c_ns, c_cat, c_nk = b[counted], ns[counted], cat[counted], nk[counted]
    for (s,), idx in groups(sig_of[c_b]):
        c = counts[s]
        calls = len(np.unique(c_b[idx]))
        gpu_ns = int(c_ns[idx].sum())
        by_cat = np.bincount(c_cat[idx], weights=c_ns[idx], minlength=len(cats))
        name, dims = signature[s]
        f = {}
        for u, v in c.flops:
            f[u] = f.get(u, 0.0) + v * calls
        rows.append(
            {
                "name": name,
                "input_dims": orjson.loads(dims),
                "dtype": c.dtype,
                "family": c.family,
                "category": str(cats[int(np.argmax(by_cat))]),
                "count": calls,
                "kernels": int(c_nk[idx].sum()),
                **roof_fields(f, c.bytes * calls, gpu_ns, peaks),
                "_flops_by_unit": f,
            }
        )
    rows.sort(key=lambda r: (r["lost_ns"] is None, -(r["lost_ns"] or 0), -r["gpu_ns"], r["name"]))
    categories = []
    for (k,), idx in groups(cat):
        mine = [r for r in rows if r["category"] == cats[k]]
        categories.append(
            {
                "category": str(cats[k]),
                "kernel_ns": int(ns[idx].sum()),
                "counted_ns": int(ns[idx][counted[idx]].sum()),
                "rows": len(mine),
                "count": sum(r["count"] for r in mine),
                **_summed(mine, peaks),
            }
        )
    categories.sort(key=lambda r: (-(r["lost_ns"] or 0), -r["kernel_ns"], r["category"]))
    listed = rows[:top]
    if rows[top:]:
        rest = rows[top:]
        listed.append(
            {
                "name": "other",
                "input_dims": None,
                "dtype": None,
                "family": None,
                "category": None,
                "count": sum(r["count"] for r in rest),
                "kernels": sum(r["kernels"] for r in rest),
                **_summed(rest, peaks),
            }
        )
    for r in listed:
        r.pop("_flops_by_unit", None)
    uncounted: dict[str, list[int]] = {}
    positions, at = np.unique(inn[~counted], return_inverse=True)
    n_k = np.bincount(at, weights=nk[~counted], minlength=len(positions))
    n_ns = np.bincount(at, weights=ns[~counted], minlength=len(positions))
    for p, k, t in zip(positions.tolist(), n_k.tolist(), n_ns.tolist(), strict=True):
        acc = uncounted.setdefault(names_of.get(p, NO_OP) if p >= 0 else NO_OP, [0, 0])
        acc[0] += round(k)
        acc[1] += round(t)
    un = sorted(
        ({"name": k, "kernels": v[0], "gpu_ns": v[1]} for k, v in uncounted.items()),
        key=lambda u: (-u["gpu_ns"], u["name"]),
    )
    if len(un) > top:
        un = un[:top] + [
            {
                "name": "other",
                "kernels": sum(u["kernels"] for u in un[top:]),
                "gpu_ns": sum(u["gpu_ns"] for u in un[top:]),
            }
        ]
    return {
        "rank": rank,
        "device": device,
        "peaks": peaks.as_dict(),
        "kernel_ns": kernel_ns,
        "counted_ns": counted_ns,
        "counted_pct": 100 * counted_ns / kernel_ns if kernel_ns else None,
        "ops": listed,
        "categories": categories,
        "uncounted": un,
    }


def _summed(rows: list[dict], peaks: Peaks) -> dict:
    """``roof_fields`` of rows taken together: FLOPs, bytes and time summed; the roof over the
    rows that have one (``time_at_roof_ns``, ``lost_ns`` their sums, ``roof_pct`` of their time)."""
    f: dict[str, float] = {}
    for r in rows:
        for u, v in r["_flops_by_unit"].items():
            f[u] = f.get(u, 0.0) + v
    gpu_ns = sum(r["gpu_ns"] for r in rows)
    out = roof_fields(f, sum(r["bytes"] for r in rows), gpu_ns, peaks)
    roofed = [r for r in rows if r["time_at_roof_ns"] is not None]
    at = sum(r["time_at_roof_ns"] for r in roofed)
    their_ns = sum(r["gpu_ns"] for r in roofed)
    out["peak_tflops"] = out["roof_tflops"] = out["bound"] = None
    out["time_at_roof_ns"] = at if roofed else None
    out["roof_pct"] = 100 * at / their_ns if roofed and their_ns else None
    out["lost_ns"] = their_ns - at if roofed else None
    return out


def roofline_notes(section: dict) -> list[str]:
    """Sentences on what the roofline could not count: no shapes recorded, GPU peaks unknown,
    kernel time outside counted ops."""
    notes = []
    if not section["shapes_recorded"]:
        notes.append(
            "no op shapes in the trace: rooflines need torch.profiler's record_shapes=True "
            "(wanscope profile records them)"
        )
        return notes
    for d in section["devices"]:
        p = d["peaks"]
        where = f"rank {d['rank']} device {d['device']}"
        if p["bandwidth_gbps"] is None or p["bf16_tflops"] is None:
            notes.append(
                f"{where} ({p['gpu'] or 'GPU name not recorded'}) is not in the peak table: give "
                "--peak-tflops, --peak-fp32-tflops and --peak-bandwidth-gbps for its rooflines"
            )
        if d["kernel_ns"] and d["counted_pct"] is not None and d["counted_pct"] <= 100 - UNCOUNTED_NOTE_PCT:
            largest = ", ".join(u["name"] for u in d["uncounted"][:3] if u["name"] != "other")
            notes.append(
                f"{where}: {100 - d['counted_pct']:.1f}% of the kernel time launched in the window is in ops "
                f"without a FLOP count, most in {largest} (roofline: uncounted)"
            )
    return notes
