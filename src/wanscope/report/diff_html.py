"""The diff as one self-contained HTML page (plotly.js inlined, works offline), in the
style of ``report.html``: the summary, attention's share, time by category (plot and
table), the largest changes by kernel, kernels appeared and disappeared, the fused
Triton kernels and the eager ops they replaced. Rendered from ``templates/diff.html``.
"""

from __future__ import annotations

from wanscope.analysis.fused import KINDS
from wanscope.report.diff_text import DEFINITIONS, TIME_LABELS, ops_text, signed_count, signed_ns, signed_pp
from wanscope.report.html import render_page
from wanscope.report.units import fmt_pct


def _figures(result: dict) -> list[tuple[str, str, object]]:
    """(element id, title, plotly figure) for the category and top-change plots."""
    import plotly.graph_objects as go

    figs = []
    cats = result["categories"]
    if cats:
        labels = [c["category"] for c in cats]
        fig = go.Figure(
            [
                go.Bar(
                    name=f"BASE: {result['base']['label']}"[:80],
                    y=labels,
                    x=[c["base_ns"] / 1e6 for c in cats],
                    orientation="h",
                    text=[fmt_pct(c["base_pct"]) for c in cats],
                ),
                go.Bar(
                    name=f"NEW: {result['new']['label']}"[:80],
                    y=labels,
                    x=[c["new_ns"] / 1e6 for c in cats],
                    orientation="h",
                    text=[fmt_pct(c["new_pct"]) for c in cats],
                ),
            ]
        )
        fig.update_layout(
            barmode="group",
            height=160 + 44 * len(cats),
            xaxis_title="ms",
            yaxis={"autorange": "reversed"},
            legend={"orientation": "h", "y": -0.2},
            margin={"l": 120, "r": 20, "t": 30, "b": 40},
        )
        figs.append(("categories", "Time by category (bar labels: share of kernel time)", fig))
    changes = result["kernels"]["top_changes"]
    if changes:
        fig = go.Figure(
            go.Bar(
                x=[r["delta_ns"] / 1e6 for r in changes],
                y=[r["name"].removeprefix("void ")[:60] for r in changes],
                orientation="h",
                hovertext=[r["name"] for r in changes],
                marker={"color": ["#c0392b" if r["delta_ns"] > 0 else "#27ae60" for r in changes]},
            )
        )
        fig.update_layout(
            height=120 + 28 * len(changes),
            xaxis_title="ms (NEW - BASE; red = slower)",
            yaxis={"autorange": "reversed"},
            margin={"l": 420, "r": 20, "t": 30, "b": 40},
        )
        figs.append(("changes", "Largest changes by kernel", fig))
    return figs


def render_diff_html(result: dict, title: str) -> str:
    """The whole page as one string."""
    return render_page(
        "diff.html",
        _figures(result),
        {"signed_ns": signed_ns, "signed_count": signed_count, "signed_pp": signed_pp, "ops": ops_text},
        title=title,
        result=result,
        kinds=KINDS,
        time_label=TIME_LABELS[result["time_basis"]],
        definitions=DEFINITIONS,
    )
