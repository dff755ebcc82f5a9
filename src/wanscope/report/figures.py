"""The report's plotly figures, each as (element id, title, figure).

Per device: the GPU timeline per stream with the largest idle gaps marked (and drawn op by op
around each of them, ``analysis.timeline``), time by category, the launch queue, memory over
the trace and the roofline. Across the run: per-step times, host self time per thread, the
icicle of host time, and an allocator snapshot's stacks and timeline. Times on the axes are in
ms, memory in GiB, rates in TFLOP/s.
"""

from __future__ import annotations

from wanscope.report.units import fmt_bytes, fmt_ns, fmt_pct

# A qualitative palette (Plotly's "D3" colours without its red, which marks the idle gaps) for
# categories, kinds and modules.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#aec7e8",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
HOST_THREADS = 4  # threads with the most busy time that get a host-op chart
HOST_OPS = 15  # ops per thread in it


def plot_text(text: str) -> str:
    """``text`` for a plotly label or hover text: plotly reads ``<a>``, ``<b>``, ``<br>`` in
    them as its own markup, so a name's ``<`` and ``>`` (C++ templates, a hostile name) are
    written as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def device_key(d: dict) -> str:
    return f"r{d['rank']}d{d['device']}"


def colour_of(keys) -> dict:
    """A palette colour per distinct key, in sorted order (None last, grey)."""
    out = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(sorted(k for k in set(keys) if k is not None))}
    out[None] = "#c7c7c7"
    return out


def timeline(d: dict, segments: list[dict], gap_windows: list[dict], shown: dict[str, str], webgl: bool = True):
    """The GPU timeline of device ``d``: one row per stream, one trace per category, and the
    ``idle gaps`` row with each listed gap as a bar and a marker (visible at any zoom). Names
    are the readable ones of ``shown``. ``webgl``: draw the streams with WebGL (fast for many
    segments; a browser holds 16 WebGL contexts, so a page of many devices draws SVG)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    scatter = go.Scattergl if webgl else go.Scatter
    mine = [s for s in segments if (s["rank"], s["device"]) == (d["rank"], d["device"])]
    streams = sorted({s["stream"] for s in mine})
    colours = colour_of(s["category"] for s in mine)
    for category in sorted({s["category"] for s in mine}):
        xs, ys, texts = [], [], []
        for s in mine:
            if s["category"] != category:
                continue
            y = f"stream {s['stream']}"
            xs += [s["start_ns"] / 1e6, s["end_ns"] / 1e6, None]
            ys += [y, y, None]
            label = plot_text(f"{shown.get(s['name'], s['name'])} ({s['ops']} ops)")
            texts += [label, label, None]
        fig.add_trace(
            scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"width": 14, "color": colours[category]},
                name=category,
                text=texts,
                hoverinfo="text+name",
            )
        )
    gx, gy, gt, mx, mt = [], [], [], [], []
    for g in gap_windows:
        gx += [g["start_ms"], g["end_ms"], None]
        gy += ["idle gaps", "idle gaps", None]
        label = plot_text(f"gap {g['i']}: idle {fmt_ns(g['dur_ns'])} before {shown.get(g['next_op'], g['next_op'])}")
        gt += [label, label, None]
        mx.append((g["start_ms"] + g["end_ms"]) / 2)
        mt.append(label)
    fig.add_trace(
        go.Scatter(
            x=gx,
            y=gy,
            mode="lines",
            line={"width": 14, "color": "red"},
            name="largest idle gaps",
            text=gt,
            hoverinfo="text",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=mx,
            y=["idle gaps"] * len(mx),
            mode="markers+text",
            marker={"symbol": "triangle-down", "size": 12, "color": "red"},
            text=[str(g["i"]) for g in gap_windows],
            textposition="top center",
            hovertext=mt,
            hoverinfo="text",
            showlegend=False,
        )
    )
    fig.update_layout(
        height=180 + 40 * len(streams),
        xaxis_title="ms from window start",
        margin={"l": 90, "r": 20, "t": 30, "b": 40},
    )
    return (f"timeline-{device_key(d)}", "GPU timeline (click a gap below to zoom to it)", fig)


def categories(d: dict):
    import plotly.graph_objects as go

    cats = d["categories"]
    colours = colour_of(c["category"] for c in cats)
    fig = go.Figure(
        go.Bar(
            x=[c["total_ns"] / 1e6 for c in cats],
            y=[c["category"] for c in cats],
            orientation="h",
            marker={"color": [colours[c["category"]] for c in cats]},
            text=[fmt_pct(c["pct"]) for c in cats],
        )
    )
    fig.update_layout(
        height=120 + 28 * len(cats),
        xaxis_title="ms",
        yaxis={"autorange": "reversed", "automargin": True},
        margin={"r": 20, "t": 30, "b": 40},
    )
    return (f"categories-{device_key(d)}", "Time by category", fig)


def steps(result: dict):
    import plotly.graph_objects as go

    rows = result["steps"]
    labels = [f"r{s['rank']} step {s['step']}" for s in rows]
    fig = go.Figure(
        [
            go.Bar(name="CPU", x=labels, y=[s["cpu_dur_ns"] / 1e6 for s in rows]),
            go.Bar(name="GPU", x=labels, y=[(s["gpu_dur_ns"] or 0) / 1e6 for s in rows]),
        ]
    )
    fig.update_layout(barmode="group", yaxis_title="ms", height=320, margin={"t": 30})
    return ("steps-chart", "Per-step time (CPU range and GPU interval)", fig)


def host_ops(thread: dict):
    """Thread ``thread`` (``host.threads[]``): its ops with most self time, coloured by kind."""
    import plotly.graph_objects as go

    ops = [{**o, "kind": o["kind"] or "other"} for o in sorted(thread["ops"], key=lambda o: -o["self_ns"])[:HOST_OPS]]
    colours = colour_of(o["kind"] for o in ops)
    fig = go.Figure()
    for kind in sorted({o["kind"] for o in ops}):
        mine = [(i, o) for i, o in enumerate(ops, 1) if o["kind"] == kind]
        fig.add_trace(
            go.Bar(
                x=[o["self_ns"] / 1e6 for _, o in mine],
                y=[plot_text(f"{i}. {o['name'][:70]}") for i, o in mine],
                orientation="h",
                name=kind,
                marker={"color": colours[kind]},
                hovertext=[
                    f"{plot_text(o['name'])}<br>{o['count']:,} calls, total {fmt_ns(o['total_ns'])}, "
                    f"self {fmt_ns(o['self_ns'])}"
                    for _, o in mine
                ],
                hoverinfo="text",
            )
        )
    order = [plot_text(f"{i}. {o['name'][:70]}") for i, o in enumerate(ops, 1)]
    fig.update_layout(
        height=140 + 26 * len(ops),
        xaxis_title="self time, ms",
        yaxis={"categoryorder": "array", "categoryarray": order[::-1], "automargin": True},
        margin={"r": 20, "t": 30, "b": 40},
    )
    key = f"r{thread['rank']}p{thread['pid']}t{thread['tid']}"
    title = f"Self time by op, rank {thread['rank']} · thread {thread['tid']} (busy {fmt_ns(thread['busy_ns'])})"
    return (f"host-{key}", title, fig)


def launch_queue(q: dict):
    """Kernels launched but not yet started over time, on device ``q`` (``host.launch_queue[]``)."""
    import plotly.graph_objects as go

    xs = [(t - q["start_ns"]) / 1e6 for t, _ in q["timeline"]]
    fig = go.Figure(go.Scatter(x=xs, y=[n for _, n in q["timeline"]], mode="lines", line_shape="hv"))
    fig.update_layout(
        height=280, xaxis_title="ms from the first launch", yaxis_title="kernels queued", margin={"t": 30}
    )
    return (f"launch-queue-r{q['rank']}d{q['device']}", f"Launch queue, rank {q['rank']} · device {q['device']}", fig)


def icicle(nodes: list[dict]):
    """Host time as an icicle, coloured by the ``nn.Module`` class each node runs under, or by
    the kind of range (op, Python frame, annotation) where the trace records no modules."""
    import plotly.graph_objects as go

    # "remainder" values (a node's time not in its drawn children) tolerate the small
    # overlaps that clock granularity leaves between nested host ranges.
    child_sum: dict[str, int] = {}
    for n in nodes:
        child_sum[n["parent"]] = child_sum.get(n["parent"], 0) + n["total_ns"]
    own = [max(n["total_ns"] - child_sum.get(n["id"], 0), 0) / 1e6 for n in nodes]
    by = "module" if any(n["module"] for n in nodes) else "kind"
    colours = colour_of(n[by] for n in nodes)
    fig = go.Figure(
        go.Icicle(
            ids=[n["id"] for n in nodes],
            parents=[n["parent"] for n in nodes],
            labels=[plot_text(n["label"][:60]) for n in nodes],
            values=own,
            branchvalues="remainder",
            marker={"colors": [colours[n[by]] for n in nodes]},
            hovertext=[
                f"{plot_text(n['label'])}<br>{fmt_ns(n['total_ns'])}"
                + (f"<br>{by}: {plot_text(n[by])}" if n[by] else "")
                for n in nodes
            ],
            hoverinfo="text",
            tiling={"orientation": "v"},
        )
    )
    fig.update_layout(height=700, margin={"t": 30, "l": 10, "r": 10, "b": 10})
    what = "nn.Module class" if by == "module" else "kind of range"
    return ("icicle", f"Host time (steps merged, coloured by {what}, nodes under 0.1% pruned)", fig)


def trace_memory(m: dict):
    """Allocated and reserved memory over the trace for ``m`` (``memory[]``, a non-empty
    ``timeline``), the peak marked."""
    import plotly.graph_objects as go

    t0 = m["timeline"][0][0]
    xs = [(p[0] - t0) / 1e6 for p in m["timeline"]]
    fig = go.Figure(
        [
            go.Scatter(x=xs, y=[p[1] / 2**30 for p in m["timeline"]], mode="lines", line_shape="hv", name="allocated"),
            go.Scatter(x=xs, y=[p[2] / 2**30 for p in m["timeline"]], mode="lines", line_shape="hv", name="reserved"),
            go.Scatter(
                x=[(m["peak_ns"] - t0) / 1e6],
                y=[m["peak_allocated_bytes"] / 2**30],
                mode="markers",
                marker={"size": 11, "color": "red"},
                name=f"peak {fmt_bytes(m['peak_allocated_bytes'])}",
            ),
        ]
    )
    fig.update_layout(height=300, xaxis_title="ms from the first memory event", yaxis_title="GiB", margin={"t": 30})
    where = "CPU" if m["device"] < 0 else f"device {m['device']}"
    return (f"memory-r{m['rank']}d{m['device']}", f"Memory over the trace, rank {m['rank']} · {where}", fig)


def roofline(d: dict):
    """Achieved TFLOP/s against arithmetic intensity (FLOP per byte) for the op rows of device
    ``d`` (``roofline.devices[]``), with the BF16 and FP32 roofs: min(peak, bandwidth x
    intensity) (Williams, Waterman and Patterson, "Roofline", CACM 2009)."""
    import plotly.graph_objects as go

    rows = [r for r in d["ops"] if r["intensity"] and r["achieved_tflops"] and r["category"] is not None]
    colours = colour_of(r["category"] for r in rows)
    fig = go.Figure()
    for cat in sorted({r["category"] for r in rows}):
        mine = [r for r in rows if r["category"] == cat]
        fig.add_trace(
            go.Scatter(
                x=[r["intensity"] for r in mine],
                y=[r["achieved_tflops"] for r in mine],
                mode="markers",
                name=cat,
                marker={"size": [6 + 24 * (r["gpu_ns"] / max(x["gpu_ns"] for x in rows)) ** 0.5 for r in mine]},
                marker_color=colours[cat],
                hovertext=[
                    f"{plot_text(r['name'])}<br>{r['count']:,} calls, {fmt_ns(r['gpu_ns'])}, {fmt_pct(r['roof_pct'])} of roof"
                    for r in mine
                ],
                hoverinfo="text",
            )
        )
    p = d["peaks"]
    lo = min([r["intensity"] for r in rows] + [0.01]) / 2
    hi = max([r["intensity"] for r in rows] + [1e4]) * 2
    bw = p["bandwidth_gbps"]
    for unit in ("bf16", "fp32"):
        peak = p[f"{unit}_tflops"]
        if peak and bw:
            knee = peak * 1e3 / bw
            xs = [lo, knee, hi] if lo < knee < hi else [lo, hi]
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[min(peak, bw * x / 1e3) for x in xs],
                    mode="lines",
                    line={"dash": "dash", "color": "#444" if unit == "bf16" else "#999"},
                    name=f"{unit.upper()} roof",
                )
            )
    fig.update_layout(
        height=420,
        xaxis={"type": "log", "title": "FLOP per byte"},
        yaxis={"type": "log", "title": "TFLOP/s"},
        margin={"t": 30},
    )
    return (f"roofline-{device_key(d)}", f"Roofline, rank {d['rank']} · device {d['device']}", fig)


def snapshot_figures(doc: dict | None) -> list[tuple[str, str, object]]:
    """Per device of an allocator snapshot's document: the stack groups live at its moment (a
    bar each) and the timeline of allocated and reserved memory, the moment marked."""
    import plotly.graph_objects as go

    from wanscope.memory.analysis import frame_text

    figs = []
    for d in (doc or {}).get("devices", []):
        key = f"snapshot-d{d['device']}"
        what = {"oom": "at the failed allocation", "peak": "at the peak", "dump": "at the dump"}[d["at"]["kind"]]
        groups = d["groups"]
        fig = go.Figure(
            go.Bar(
                x=[g["bytes"] / 2**30 for g in groups],
                y=[plot_text(f"{i}. {g['where'][:70]}") for i, g in enumerate(groups, 1)],
                orientation="h",
                text=[fmt_pct(g["pct"]) for g in groups],
                hovertext=[
                    "<br>".join(
                        [f"{fmt_bytes(g['bytes'])} in {g['allocations']:,}"]
                        + [plot_text(frame_text(f)) for f in g["stack"][:16]]
                    )
                    for g in groups
                ],
                hoverinfo="text",
            )
        )
        fig.update_layout(
            height=120 + 28 * len(groups),
            xaxis_title="GiB",
            yaxis={"autorange": "reversed", "automargin": True},
            margin={"r": 20, "t": 30, "b": 40},
        )
        figs.append((f"{key}-stacks", f"Live allocations by stack, {what} (largest first)", fig))
        points = d["timeline"]
        timed = d["trace"]["timeline_axis"] == "time_ns"
        xs = [p[0] / 1e6 if timed else p[0] for p in points]
        fig = go.Figure(
            [
                go.Scatter(x=xs, y=[p[1] / 2**30 for p in points], mode="lines", line_shape="hv", name="allocated"),
                go.Scatter(x=xs, y=[p[2] / 2**30 for p in points], mode="lines", line_shape="hv", name="reserved"),
            ]
        )
        at = d["at"]
        if at["index"] is not None:
            x = at["time_ns"] / 1e6 if timed else at["index"]
            fig.add_trace(
                go.Scatter(
                    x=[x],
                    y=[d["allocated_bytes"] / 2**30],
                    mode="markers",
                    marker={"size": 11, "color": "red"},
                    name="failed allocation" if at["kind"] == "oom" else "peak",
                )
            )
        fig.update_layout(
            height=320,
            xaxis_title="ms after the trace's first event" if timed else "event",
            yaxis_title="GiB",
            margin={"t": 30},
        )
        figs.append((f"{key}-timeline", "Allocated and reserved memory over the snapshot", fig))
    return figs
