"""The self-contained HTML report: one file, works offline (plotly.js inlined, no CDN).

The page opens on a table of contents of the sections the run has data for: an overview, then
per device the GPU timeline with its largest idle gaps (each a link that zooms the timeline to
it), time by category, the top kernels under readable names (``kernel_names``; the full name on
hover) and the call stack behind each gap collapsed to the program's own frames (``stacks``;
expandable); then steps, the host side (self time per op and thread, Python frames, launch
overhead), the launch queue, the icicle of host time, memory (over the trace, and an allocator
snapshot's stacks), the rooflines, syncs and ranks. A trace without GPU activity gets the host
side alone. The figures are built in ``figures``; the page is rendered from the Jinja2 template
``templates/report.html`` shipped with the package.
"""

from __future__ import annotations

from importlib import resources

import jinja2

from wanscope.report import figures
from wanscope.report.kernel_names import display_names
from wanscope.report.stacks import collapse, common_prefix
from wanscope.report.text import RANKS_DEFINITIONS
from wanscope.report.units import fmt_bytes, fmt_ns, fmt_pct

GAP_CONTEXT = 10  # a jump to a gap shows this many gap lengths of activity on each side of it
MIN_CONTEXT_NS = 20_000  # and at least this much


def gap_windows(result: dict) -> dict[str, list[dict]]:
    """Per device key (``r0d0``), each listed gap (``gaps.largest``) numbered from 1 with its
    place on the timeline (ms from the window's start) and the view a jump to it shows
    (``from_ms`` to ``to_ms``; ``from_ns``/``to_ns`` absolute, for the timeline's detail)."""
    out = {}
    for d in result["devices"]:
        rows = []
        for i, g in enumerate(d["gaps"]["largest"], 1):
            pad = max(GAP_CONTEXT * g["dur_ns"], MIN_CONTEXT_NS)
            a = g["start_ns"] - d["window_start_ns"]
            rows.append(
                {
                    "i": i,
                    "dur_ns": g["dur_ns"],
                    "start_ms": a / 1e6,
                    "end_ms": (a + g["dur_ns"]) / 1e6,
                    "from_ms": (a - pad) / 1e6,
                    "to_ms": (a + g["dur_ns"] + pad) / 1e6,
                    "from_ns": g["start_ns"] - pad,
                    "to_ns": g["start_ns"] + g["dur_ns"] + pad,
                    "next_op": g["next_op"]["name"],
                }
            )
        out[figures.device_key(d)] = rows
    return out


def _display(result: dict, segments: list[dict]) -> dict[str, str]:
    """A readable name (``kernel_names.display_names``) for every kernel and op the device
    sections name: the top kernels, the fused kernels, the ops that end the listed gaps and
    those the timeline's segments are named after."""
    names = [s["name"] for s in segments]
    for d in result["devices"]:
        names += [k["name"] for k in d["top_kernels"] + d.get("fused_kernels", []) if k["name"] != "other"]
        names += [g["next_op"]["name"] for g in d["gaps"]["largest"]]
    return display_names(names)


def _kernels(result: dict, shown: dict[str, str]) -> dict[str, dict]:
    """Per device key, ``top`` (the top kernels) and ``fused`` (the fused Triton kernels), each
    row with its ``display`` name from ``shown`` and, for the top kernels, its bar's length
    (``bar_pct``, percent of the largest)."""
    out = {}
    for d in result["devices"]:
        top = max((k["total_ns"] for k in d["top_kernels"]), default=0) or 1
        out[figures.device_key(d)] = {
            "top": [
                {**k, "display": shown.get(k["name"], k["name"]), "bar_pct": 100 * k["total_ns"] / top}
                for k in d["top_kernels"]
            ],
            "fused": [{**k, "display": shown[k["name"]]} for k in d.get("fused_kernels", [])],
        }
    return out


def _stacks(result: dict, shown: dict[str, str]) -> dict[str, list[dict]]:
    """Per device key, each listed gap's ``next_op`` under its readable name and its stack:
    ``own`` (``stacks.collapse``), ``shared`` (the outer entries every listed gap has, left
    out) and ``skipped`` (the library frames and ops left out after those)."""
    out = {}
    for d in result["devices"]:
        stacks = [g["stack"] for g in d["gaps"]["largest"]]
        skip = common_prefix(stacks)
        rows = []
        for g, s in zip(d["gaps"]["largest"], stacks, strict=True):
            own = collapse(s, skip)
            hidden = len(s) - skip - len(own)
            rows.append({"next_op": shown[g["next_op"]["name"]], "own": own, "skipped": hidden, "shared": skip})
        out[figures.device_key(d)] = rows
    return out


WEBGL_DEVICES = 6  # timelines drawn with WebGL at most (a browser keeps 16 WebGL contexts)


def _figures(
    result: dict, segments: list[dict], icicle: list[dict], gaps: dict, shown: dict[str, str]
) -> list[tuple[str, str, object]]:
    figs = []
    webgl = len(result["devices"]) <= WEBGL_DEVICES
    for d in result["devices"]:
        figs.append(figures.timeline(d, segments, gaps[figures.device_key(d)], shown, webgl))
        figs.append(figures.categories(d))
    if result["steps"]:
        figs.append(figures.steps(result))
    host = result.get("host") or {}
    for t in sorted(host.get("threads", []), key=lambda t: -t["busy_ns"])[: figures.HOST_THREADS]:
        if t["ops"]:
            figs.append(figures.host_ops(t))
    for q in host.get("launch_queue", []):
        if q["timeline"]:
            figs.append(figures.launch_queue(q))
    if icicle:
        figs.append(figures.icicle(icicle))
    for m in result.get("memory") or []:
        if m["timeline"]:
            figs.append(figures.trace_memory(m))
    for d in (result.get("roofline") or {}).get("devices", []):
        if any(r["intensity"] and r["achieved_tflops"] and r["category"] is not None for r in d["ops"]):
            figs.append(figures.roofline(d))
    figs += figures.snapshot_figures(result.get("memory_snapshot"))
    return figs


def sections(result: dict, figs: list[tuple[str, str, object]]) -> list[dict]:
    """The table of contents: ``id`` and ``title`` of every section the page has data for."""
    ids = {f[0] for f in figs}
    out = [{"id": "overview", "title": "Overview"}]
    for d in result["devices"]:
        out.append({"id": f"device-{figures.device_key(d)}", "title": f"Rank {d['rank']} · device {d['device']}"})
    if result["steps"]:
        out.append({"id": "steps", "title": "Steps"})
    host = result.get("host") or {}
    if any(t["ops"] for t in host.get("threads", [])):
        out.append({"id": "host", "title": "Host side"})
    if any(i.startswith("launch-queue-") for i in ids):
        out.append({"id": "launch-queue", "title": "Launch queue"})
    if "icicle" in ids:
        out.append({"id": "icicle-section", "title": "Host time icicle"})
    if any(i.startswith(("memory-", "snapshot-")) for i in ids) or result.get("memory_snapshot"):
        out.append({"id": "memory", "title": "Memory"})
    if any(i.startswith("roofline-") for i in ids):
        out.append({"id": "roofline", "title": "Rooflines"})
    out.append({"id": "syncs", "title": "Host-device syncs"})
    if result.get("ranks") is not None:
        out.append({"id": "ranks", "title": "Ranks"})
    return out


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
    env.tests["startswith"] = str.startswith
    return env.get_template(template).render(plots=plots, plotly_js=plotly_js, **context)


def render_html(result: dict, segments: list[dict], icicle: list[dict], title: str) -> str:
    """The whole page as one string.
    ``segments`` are ``analysis.timeline.timeline_segments`` rows (with ``gap_windows``' views as
    its detail), ``icicle`` ``analysis.icicle.icicle_nodes``."""
    gaps = gap_windows(result)
    shown = _display(result, segments)
    figs = _figures(result, segments, icicle, gaps, shown)
    return render_page(
        "report.html",
        figs,
        {"run_value": run_value, "bytes": fmt_bytes},
        title=title,
        result=result,
        sections=sections(result, figs),
        gaps=gaps,
        kernels=_kernels(result, shown),
        stacks=_stacks(result, shown),
        ranks_definitions=RANKS_DEFINITIONS,
    )
