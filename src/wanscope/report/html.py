"""The self-contained HTML report: one file, works offline (plotly.js inlined, no CDN).

Plots: GPU timeline per stream with the largest idle gaps marked, time by category, top
kernels, per-step CPU and GPU times, an icicle graph of host time and, for a run with an
allocator snapshot (``memory_snapshot``), the live allocations by stack at the peak or the failed
allocation, and allocated and reserved memory over the snapshot's trace. Tables: the call
stack behind the largest gaps, syncs and, with several ranks, communication vs compute per
rank and the slowest rank per step. The page is rendered from the Jinja2 template
``templates/report.html`` shipped with the package.
"""

from __future__ import annotations

from importlib import resources

import jinja2

from wanscope.report.text import RANKS_DEFINITIONS
from wanscope.report.units import fmt_bytes, fmt_ns, fmt_pct

MAX_HTML_BYTES = 8 << 20


def _figures(result: dict, segments: list[dict], icicle: list[dict]) -> list[tuple[str, str, object]]:
    """(element id, title, plotly figure) for every plot on the page."""
    import plotly.graph_objects as go

    figs = []
    for d in result["devices"]:
        key = f"r{d['rank']}d{d['device']}"
        fig = go.Figure()
        mine = [s for s in segments if (s["rank"], s["device"]) == (d["rank"], d["device"])]
        streams = sorted({s["stream"] for s in mine})
        for category in sorted({s["category"] for s in mine}):
            xs, ys, texts = [], [], []
            for s in mine:
                if s["category"] != category:
                    continue
                y = f"stream {s['stream']}"
                xs += [s["start_ns"] / 1e6, s["end_ns"] / 1e6, None]
                ys += [y, y, None]
                label = f"{s['name'][:80]} ({s['ops']} ops)"
                texts += [label, label, None]
            fig.add_trace(
                go.Scattergl(
                    x=xs, y=ys, mode="lines", line={"width": 14}, name=category, text=texts, hoverinfo="text+name"
                )
            )
        gx, gy, gt = [], [], []
        for g in d["gaps"]["largest"]:
            a = (g["start_ns"] - d["window_start_ns"]) / 1e6
            gx += [a, a + g["dur_ns"] / 1e6, None]
            gy += ["idle gaps", "idle gaps", None]
            label = f"idle {fmt_ns(g['dur_ns'])} before {g['next_op']['name'][:60]}"
            gt += [label, label, None]
        fig.add_trace(
            go.Scattergl(
                x=gx,
                y=gy,
                mode="lines",
                line={"width": 14, "color": "red"},
                name="largest idle gaps",
                text=gt,
                hoverinfo="text",
            )
        )
        fig.update_layout(
            height=160 + 40 * len(streams),
            xaxis_title="ms from window start",
            margin={"l": 90, "r": 20, "t": 30, "b": 40},
        )
        figs.append((f"timeline-{key}", f"GPU timeline, rank {d['rank']} device {d['device']}", fig))

        cats = [c for c in d["categories"]]
        fig = go.Figure(
            go.Bar(
                x=[c["total_ns"] / 1e6 for c in cats],
                y=[c["category"] for c in cats],
                orientation="h",
                text=[fmt_pct(c["pct"]) for c in cats],
            )
        )
        fig.update_layout(
            height=120 + 28 * len(cats),
            xaxis_title="ms",
            yaxis={"autorange": "reversed"},
            margin={"l": 120, "r": 20, "t": 30, "b": 40},
        )
        figs.append((f"categories-{key}", "Time by category", fig))

        tops = d["top_kernels"]
        fig = go.Figure(
            go.Bar(
                x=[k["total_ns"] / 1e6 for k in tops],
                # numbered: kernels whose names share their first 60 characters
                # would otherwise be drawn as one bar
                y=[f"{i}. {k['name'].removeprefix('void ')[:60]}" for i, k in enumerate(tops, 1)],
                orientation="h",
                text=[fmt_pct(k["pct"]) for k in tops],
                hovertext=[k["name"] for k in tops],
            )
        )
        fig.update_layout(
            height=120 + 28 * len(tops),
            xaxis_title="ms",
            yaxis={"autorange": "reversed"},
            margin={"l": 420, "r": 20, "t": 30, "b": 40},
        )
        figs.append((f"kernels-{key}", "Top kernels", fig))
    if result["steps"]:
        steps = result["steps"]
        labels = [f"r{s['rank']} step {s['step']}" for s in steps]
        fig = go.Figure(
            [
                go.Bar(name="CPU", x=labels, y=[s["cpu_dur_ns"] / 1e6 for s in steps]),
                go.Bar(name="GPU", x=labels, y=[(s["gpu_dur_ns"] or 0) / 1e6 for s in steps]),
            ]
        )
        fig.update_layout(barmode="group", yaxis_title="ms", height=320, margin={"t": 30})
        figs.append(("steps", "Per-step time (CPU range and GPU interval)", fig))
    if icicle:
        # "remainder" values (a node's time not in its drawn children) tolerate the small
        # overlaps that clock granularity leaves between nested host ranges.
        child_sum: dict[str, int] = {}
        for n in icicle:
            child_sum[n["parent"]] = child_sum.get(n["parent"], 0) + n["total_ns"]
        own = [max(n["total_ns"] - child_sum.get(n["id"], 0), 0) / 1e6 for n in icicle]
        fig = go.Figure(
            go.Icicle(
                ids=[n["id"] for n in icicle],
                parents=[n["parent"] for n in icicle],
                labels=[n["label"][:60] for n in icicle],
                values=own,
                branchvalues="remainder",
                hovertext=[f"{n['label']}<br>{fmt_ns(n['total_ns'])}" for n in icicle],
                hoverinfo="text",
                tiling={"orientation": "v"},
            )
        )
        fig.update_layout(height=700, margin={"t": 30, "l": 10, "r": 10, "b": 10})
        figs.append(("icicle", "Host time (icicle: identical stacks merged, nodes under 0.1% pruned)", fig))
    figs += _memory_figures(result.get("memory_snapshot"))
    return figs


def _memory_figures(doc: dict | None) -> list[tuple[str, str, object]]:
    """Per device of an allocator snapshot's document: the stack groups live at its moment (a
    bar each) and the timeline of allocated and reserved memory, the moment marked."""
    import plotly.graph_objects as go

    from wanscope.memory.analysis import frame_text

    figs = []
    for d in (doc or {}).get("devices", []):
        key = f"memory-d{d['device']}"
        what = {"oom": "at the failed allocation", "peak": "at the peak", "dump": "at the dump"}[d["at"]["kind"]]
        groups = d["groups"]
        fig = go.Figure(
            go.Bar(
                x=[g["bytes"] / 2**30 for g in groups],
                y=[f"{i}. {g['where'][:70]}" for i, g in enumerate(groups, 1)],
                orientation="h",
                text=[fmt_pct(g["pct"]) for g in groups],
                hovertext=[
                    "<br>".join(
                        [f"{fmt_bytes(g['bytes'])} in {g['allocations']:,}"] + [frame_text(f) for f in g["stack"][:16]]
                    )
                    for g in groups
                ],
                hoverinfo="text",
            )
        )
        fig.update_layout(
            height=120 + 28 * len(groups),
            xaxis_title="GiB",
            yaxis={"autorange": "reversed"},
            margin={"l": 420, "r": 20, "t": 30, "b": 40},
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
        figs.append((f"{key}-timeline", "Allocated and reserved memory over the trace", fig))
    return figs


def run_value(value, key: str = "") -> str:
    """A ``run`` field as text: byte counts in GiB, ``*_ns`` in time units, nested objects as
    ``key: value`` lists, booleans as yes/no."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {run_value(v, k if k.endswith(('_bytes', '_ns')) else key)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(run_value(v, key) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and key.endswith("_bytes"):
        return f"{value / 2**30:.2f} GiB"
    if isinstance(value, (int, float)) and key.endswith("_ns"):
        return fmt_ns(value)
    return str(value)


def render_page(template: str, figs: list[tuple[str, str, object]], filters: dict, **context) -> str:
    """``templates/<template>`` (a child of ``base.html``) as one string, with plotly.js inlined and
    ``figs`` ((element id, title, plotly figure)) as its ``plots``; the filters ``ns`` and ``pct``
    and ``filters`` are available to it."""
    plots = [{"id": fid, "title": t, "json": fig.to_json()} for fid, t, fig in figs]
    plotly_js = resources.files("plotly").joinpath("package_data/plotly.min.js").read_text()
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: resources.files("wanscope.report").joinpath("templates", name).read_text()
        ),
        autoescape=True,
    )
    env.filters.update(ns=fmt_ns, pct=fmt_pct, **filters)
    return env.get_template(template).render(plots=plots, plotly_js=plotly_js, **context)


def render_html(result: dict, segments: list[dict], icicle: list[dict], title: str) -> str:
    """The whole page as one string (at most ``MAX_HTML_BYTES`` for realistic traces)."""
    return render_page(
        "report.html",
        _figures(result, segments, icicle),
        {"run_value": run_value, "bytes": fmt_bytes},
        title=title,
        result=result,
        ranks_definitions=RANKS_DEFINITIONS,
    )
