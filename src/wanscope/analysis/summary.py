"""``analyze``: every per-device analysis in one JSON-ready object.

The object's layout is versioned by ``SCHEMA_VERSION``; docs/json.md documents each field
("analyze JSON").
"""

from __future__ import annotations

import orjson

from wanscope.analysis.completeness import completeness, graph_trace_note
from wanscope.analysis.fused import fused_kernels
from wanscope.analysis.gaps import idle_gaps
from wanscope.analysis.host import host
from wanscope.analysis.host_ranges import host_ranges
from wanscope.analysis.kernels import categories, top_kernels
from wanscope.analysis.memory import memory
from wanscope.analysis.ranks import communication, rank_count, rank_summary
from wanscope.analysis.roofline import inputs, roofline, roofline_notes
from wanscope.analysis.scope import Scope
from wanscope.analysis.steps import step_times
from wanscope.analysis.syncs import find_syncs
from wanscope.analysis.utilization import device_utilization
from wanscope.trace.kineto import CLAIMED_RANK_KEY, OTHER_ACCELERATOR_KEY, OTHER_ACCELERATORS
from wanscope.trace.link import PARTIAL_OVERLAPS_KEY, memory_limit
from wanscope.trace.load import NEST_MEMORY_LIMIT
from wanscope.trace.nsys_export import DEGRADED_KEY

SCHEMA_VERSION = 4


def warnings(con) -> dict[str, int]:
    """Counts by kind of records excluded or flagged at ingest, over all sources."""
    return {
        k: int(n)
        for k, n in con.execute("SELECT kind, sum(count) FROM ingest_warnings GROUP BY kind ORDER BY kind").fetchall()
    }


def sources(con) -> list[dict]:
    """The inputs in order: ``path``, ``format``, ``rank``, ``events``, and ``claimed_rank``,
    the rank the file claimed where an earlier input had it (it got ``rank`` instead), else
    None."""
    return [
        {"path": p, "format": f, "rank": r, "events": n, "claimed_rank": None if c is None else int(c)}
        for p, f, r, n, c in con.execute(
            f"""SELECT path, format, rank, event_count, m.value FROM sources
                LEFT JOIN meta m ON m.source_id = sources.source_id AND m.key = '{CLAIMED_RANK_KEY}'
                ORDER BY sources.source_id"""
        ).fetchall()
    ]


def source_of_rank(con) -> dict[int, int]:
    """rank -> index of its input in ``sources`` (an Nsight Systems export holds one rank
    per process, its ``meta`` key ``ranks``)."""
    out = {}
    for source_id, rank, fmt, ranks in con.execute(
        "SELECT source_id, rank, format, (SELECT value FROM meta m WHERE m.source_id = s.source_id AND key = 'ranks') "
        "FROM sources s ORDER BY source_id"
    ).fetchall():
        out[rank] = source_id
        if fmt == "nsys" and ranks:
            out.update({int(r): source_id for r in orjson.loads(ranks).values()})
    return out


def rank_notes(srcs: list[dict]) -> list[str]:
    """One sentence per input whose rank an earlier input had, naming both files."""
    notes = []
    for s in srcs:
        if s["claimed_rank"] is None:
            continue
        holder = next((h["path"] for h in srcs if h["rank"] == s["claimed_rank"]), None)
        notes.append(
            f"{s['path']} claims rank {s['claimed_rank']}, which {holder or 'an earlier input'} has "
            f"(two jobs, or two runs of one worker?): kept apart, {s['path']} as rank {s['rank']}"
        )
    return notes


def stream_notes(con, warns: dict[str, int]) -> list[str]:
    """Sentences on GPU records whose times overlap the next record on their stream: those
    clipped at ingest (``clipped_duration``), and those that only overlap its start, kept."""

    def records(n: int) -> str:
        return f"{n:,} GPU record" + ("" if n == 1 else "s")

    notes = []
    clipped = warns.get("clipped_duration", 0)
    if clipped:
        its = "its" if clipped == 1 else "their"
        notes.append(
            f"{records(clipped)} extended past the end of the next record on {its} stream, which a stream "
            "that runs its work in order cannot do (a known CUPTI timestamp artifact): clipped to that "
            "record's start (warnings: clipped_duration)"
        )
    (partial,) = con.execute(
        f"SELECT coalesce(sum(try_cast(value AS BIGINT)), 0) FROM meta WHERE key = '{PARTIAL_OVERLAPS_KEY}'"
    ).fetchall()[0]
    if partial:
        verb, its = ("ends", "its") if partial == 1 else ("end", "their")
        notes.append(
            f"{records(int(partial))} {verb} after the next record on {its} stream has started (programmatic "
            "dependent launch lets a kernel start before the previous one ends): kept as recorded; busy "
            "time counts the overlap once"
        )
    return notes


def other_accelerator_notes(con) -> list[str]:
    """One sentence on the device events of other accelerators (MTIA, ...) left out, by
    Kineto category with counts."""
    by_cat: dict[str, int] = {}
    for (text,) in con.execute(f"SELECT value FROM meta WHERE key = '{OTHER_ACCELERATOR_KEY}'").fetchall():
        for cat, n in orjson.loads(text).items():
            by_cat[cat] = by_cat.get(cat, 0) + int(n)
    if not by_cat:
        return []
    total = sum(by_cat.values())
    parts = ", ".join(f"{cat} ({OTHER_ACCELERATORS.get(cat, 'other')}) {n:,}" for cat, n in sorted(by_cat.items()))
    return [
        f"{total:,} device event{'s' if total != 1 else ''} of other accelerators left out: {parts}; "
        "the analysis covers CUDA and ROCm GPU work (kernels, memcpys, memsets) "
        "(warnings: other_accelerator)"
    ]


def degraded_notes(con) -> list[str]:
    """One sentence per optional column an Nsight Systems export lacked, naming the file
    and what was lost (``trace.nsys.DEGRADED_KEY``)."""
    notes = []
    for path, text in con.execute(
        f"SELECT s.path, m.value FROM meta m JOIN sources s USING (source_id) WHERE m.key = '{DEGRADED_KEY}' "
        "ORDER BY s.source_id"
    ).fetchall():
        notes += [f"{path}: the export's {sentence}" for sentence in orjson.loads(text)]
    return notes


def run_notes(con) -> list[str]:
    """The notes a wanscope run left in its trace (``wanscope_run``, e.g. that its weights
    were random), so that every later analysis of the trace says them too."""
    notes = []
    for (text,) in con.execute("SELECT DISTINCT value FROM meta WHERE key = 'wanscope_run'").fetchall():
        try:
            note = orjson.loads(text).get("note")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(note, str) and note and note not in notes:
            notes.append(note)
    return notes


def device_communication(rows: list[dict]) -> dict:
    """(rank, device) -> its communication kernels against its compute (``ranks.communication``'s
    ``rows`` without ``rank`` and ``device``), for each device that ran communication kernels,
    with one rank as with several (as HTA reports per rank)."""
    return {
        (r["rank"], r["device"]): {k: v for k, v in r.items() if k not in ("rank", "device")}
        for r in rows
        if r["communication_count"]
    }


def analyze(
    con,
    top: int = 10,
    scope: Scope | None = None,
    min_gap_ns: int = 0,
    peak_tflops: float | None = None,
    peak_fp32_tflops: float | None = None,
    peak_bandwidth_gbps: float | None = None,
) -> dict:
    """Analyze an ingested trace database.

    Args:
        con: DuckDB connection with the canonical tables (``wanscope.trace.open_traces``).
        top: kernels listed per device before the ``other`` row; also the number of
            largest gaps listed, and of roofline rows.
        scope: steps to restrict to (default: the whole trace).
        min_gap_ns: ignore idle gaps shorter than this (ns).
        peak_tflops, peak_fp32_tflops, peak_bandwidth_gbps: measured peaks for the rooflines
            (BF16/FP16 tensor-core TFLOP/s, FP32 TFLOP/s, DRAM GB/s), replacing the datasheet
            table's (``analysis.peaks``).

    Raises:
        UsageError: ``scope`` selects none of the trace's steps.

    Returns:
        A dict: ``schema_version``, ``sources``, ``warnings``, ``devices`` (one per
        (rank, device) with GPU activity), ``syncs``, ``steps``, ``host`` (``analysis.host``: host time and self time by op per
        thread, Python frames, launch overhead and the launch queue), ``roofline``
        (``analysis.roofline``: FLOPs and bytes of the ops with recorded shapes against each
        GPU's peaks), ``memory`` (``analysis.memory``:
        one per (rank, device) with PyTorch's memory events, the CPU as -1), and ``notes`` (plain
        sentences, e.g. "no GPU activity" for a CPU-only trace); with more than one rank also
        ``ranks`` (communication time and overlap per device, slowest rank per step).
    """
    scope = scope or Scope()
    scope.check(con)
    devices = device_utilization(con, scope)
    tops = top_kernels(con, scope, top)
    cats = categories(con, scope)
    gaps = idle_gaps(con, scope, top, min_gap_ns)
    fused = fused_kernels(con, scope)
    empty_gaps = {"count": 0, "total_ns": 0, "histogram": {}, "largest": []}
    source_of = source_of_rank(con)
    several = rank_count(con) > 1
    # queried where the ranks section needs it or a device ran communication kernels
    has_comm = any(row["category"] == "communication" for rows in cats.values() for row in rows)
    comm_rows = communication(con, scope) if several or has_comm else []
    comm = device_communication(comm_rows)
    for d in devices:
        key = (d["rank"], d["device"])
        d["source"] = source_of.get(d["rank"])
        d["top_kernels"] = tops.get(key, [])
        d["categories"] = cats.get(key, [])
        d["communication"] = comm.get(key)
        d["gaps"] = gaps.get(key, empty_gaps)
        d["fused_kernels"] = fused.get(key, [])
    gpu_ranks = (
        {d["rank"] for d in device_utilization(con, Scope())} if scope.step_range else {d["rank"] for d in devices}
    )
    srcs = sources(con)
    warns = warnings(con)
    steps = step_times(con, scope)
    missing, missing_notes = completeness(con, steps, gpu_ranks)
    mem = memory(con, top)
    read = inputs(con)  # the rooflines' queries, with DuckDB's full memory
    with memory_limit(con, NEST_MEMORY_LIMIT):  # one nesting of the host ranges for both
        ranges = host_ranges(con, scope)
        host_side = host(con, scope, top, ranges=ranges)
        peaks = (peak_tflops, peak_fp32_tflops, peak_bandwidth_gbps)
        roof = roofline(con, scope, top, *peaks, ranges=ranges, read=read)
    del ranges, read
    notes = (
        rank_notes(srcs)
        + degraded_notes(con)
        + stream_notes(con, warns)
        + other_accelerator_notes(con)
        + graph_trace_note(warns)
        + missing_notes
        + run_notes(con)
        + (roofline_notes(roof) if devices else [])
    )
    warns = dict(sorted({**warns, **missing}.items()))
    if not devices:
        notes.append(
            "no GPU activity: the trace holds no kernels, memcpys or memsets with valid times"
            + (" in the selected steps" if scope.step_range else "")
            + "; GPU utilization, kernels and gaps need a trace captured with CUDA activities on a GPU"
        )
    if not mem:
        notes.append(
            "no memory events in the trace: record them with torch.profiler's profile_memory=True "
            "(wanscope profile --memory) for peak memory and what holds it"
        )
    result = {
        "schema_version": SCHEMA_VERSION,
        "sources": srcs,
        "warnings": warns,
        "devices": devices,
        "syncs": find_syncs(con, gpu_ranks, scope),
        "steps": steps,
        "host": host_side,
        "roofline": roof,
        "memory": mem,
        "notes": notes,
    }
    if several:
        result["ranks"] = rank_summary(con, scope, comm_rows)
    return result
