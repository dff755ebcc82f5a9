"""The Python API: ``t = wanscope.open("trace.json.gz")``, then SQL on the canonical tables and the
analyses as DataFrames, for notebooks (``docs/api.md``).

``import wanscope`` loads none of torch, DuckDB or pandas; ``wanscope.open`` loads this module
(and DuckDB), and each DataFrame accessor pandas. The accessors are the ``analyze`` JSON's
lists (``docs/json.md``, "analyze JSON") as rows, with ``rank`` and ``device`` added where the
JSON nests them per device; the units are the JSON's (``_ns``: nanoseconds, ``_pct``: percent).
"""

from __future__ import annotations

import os
from functools import cached_property

from wanscope.analysis.scope import Scope, parse_step_range


class Trace:
    """One or more ingested traces (Kineto JSON, Nsight Systems SQLite, a folder of rank files,
    or a database kept with ``db``), analyzed lazily, once.

    Raises (from the constructor):
        InputError: a file that is missing or is no trace it can read (the message names it).
        ValueError: ``top`` not a positive int.
    """

    def __init__(
        self,
        paths,
        db: str | os.PathLike | None = None,
        step_range: str | None = None,
        top: int = 10,
        peak_tflops: float | None = None,
        peak_fp32_tflops: float | None = None,
        peak_bandwidth_gbps: float | None = None,
    ):
        from wanscope.trace import open_traces

        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ValueError(f"top={top!r}: expected a positive int, the rows listed before 'other'")
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.con = open_traces([str(p) for p in paths], db=db)
        self._catalog = self.con.execute("SELECT current_database()").fetchone()[0]
        self._scope = Scope(parse_step_range(step_range))
        self._top = top
        self._peaks = {
            "peak_tflops": peak_tflops,
            "peak_fp32_tflops": peak_fp32_tflops,
            "peak_bandwidth_gbps": peak_bandwidth_gbps,
        }

    def sql(self, query: str):
        """A DuckDB relation of ``query`` on the canonical tables and the SQL macros the analyses
        build on (``wanscope schema`` lists both; docs/sql.md the macros): ``.df()`` for pandas,
        ``.arrow()`` and ``.pl()`` where pyarrow or polars are installed. Each call has a cursor
        of its own, so relations can be read in any order."""
        from wanscope.analysis.stdlib import create_macros

        cursor = self.con.cursor()
        cursor.execute(f'USE "{self._catalog}"')  # where the tables are (a cursor starts elsewhere)
        create_macros(cursor)  # TEMP macros belong to one connection, and a cursor is another
        return cursor.sql(query)

    @cached_property
    def _analysis(self) -> dict:
        from wanscope.analysis.summary import analyze

        return analyze(self.con, top=self._top, scope=self._scope, **self._peaks)

    def analyze(self) -> dict:
        """The ``wanscope analyze --format json`` dict."""
        return self._analysis

    def kernels(self):
        """The top kernels per device (then ``other``): rank, device, name, count, total_ns, ..."""
        return _per_device(self._analysis, "top_kernels")

    def categories(self):
        """Kernel time by category per device: rank, device, category, count, total_ns, pct."""
        return _per_device(self._analysis, "categories")

    def gaps(self):
        """The largest idle gaps per device, each with its call stack (``stack``: outermost first)."""
        rows = [
            {"rank": d["rank"], "device": d["device"], **gap}
            for d in self._analysis["devices"]
            for gap in d["gaps"]["largest"]
        ]
        return _frame(rows)

    def syncs(self):
        """Host-device syncs (and, on a CPU trace, the would-be syncs)."""
        return _frame(self._analysis["syncs"])

    def steps(self):
        """Per-step CPU and GPU times: rank, step, cpu_start_ns, cpu_dur_ns, gpu_start_ns, gpu_dur_ns."""
        return _frame(self._analysis["steps"])

    def host_ops(self):
        """Host time by op per thread (the ``top`` by self time, then ``other``): rank, pid, tid,
        name, kind, count, total_ns, self_ns, self_pct (% of the thread's busy time)."""
        rows = [
            {"rank": th["rank"], "pid": th["pid"], "tid": th["tid"], **op}
            for th in self._analysis["host"]["threads"]
            for op in th["ops"]
        ]
        return _frame(rows)

    def python_frames(self):
        """The Python frames with most self time over all threads: name, count, total_ns, self_ns."""
        return _frame(self._analysis["host"]["python_frames"])

    def roofline(self, by: str = "op"):
        """The rooflines per device (``analysis.roofline``): ``by="op"``, the op rows furthest below
        their roof first (rank, device, name, input_dims, dtype, family, category, count, kernels,
        flops, bytes, gpu_ns, achieved_tflops, achieved_gbps, intensity, peak_tflops,
        roof_tflops, bound, time_at_roof_ns, roof_pct, lost_ns); ``by="category"``, the same per
        kernel category with kernel_ns and counted_ns; ``by="uncounted"``, the kernel time of ops
        without a FLOP count (name, kernels, gpu_ns). Empty for a trace without GPU kernels.

        Raises:
            ValueError: ``by`` is none of those.
        """
        key = {"op": "ops", "category": "categories", "uncounted": "uncounted"}.get(by)
        if key is None:
            raise ValueError(f"by={by!r}: expected 'op', 'category' or 'uncounted'")
        rows = [
            {"rank": d["rank"], "device": d["device"], **row}
            for d in self._analysis["roofline"]["devices"]
            for row in d[key]
        ]
        return _frame(rows)

    def memory(self):
        """Peak memory per (rank, device) from PyTorch's memory events (device -1: the CPU):
        rank, device, events, peak_allocated_bytes, peak_ns, peak_reserved_bytes, timeline
        ([time_ns, allocated, reserved] points) and at_peak (the blocks live at the peak by
        allocating op); empty for a trace without memory events."""
        return _frame(self._analysis["memory"])

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _per_device(result: dict, key: str):
    return _frame([{"rank": d["rank"], "device": d["device"], **row} for d in result["devices"] for row in d[key]])


def _frame(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(rows)


def open(
    paths,
    db: str | os.PathLike | None = None,
    step_range: str | None = None,
    top: int = 10,
    peak_tflops: float | None = None,
    peak_fp32_tflops: float | None = None,
    peak_bandwidth_gbps: float | None = None,
) -> Trace:  # shadows the builtin inside this module only
    """Ingest ``paths`` (a path or a list, as ``wanscope analyze`` takes them); see ``Trace``.
    ``peak_*``: measured peaks for the rooflines (``analyze``'s ``--peak-*`` options)."""
    return Trace(
        paths,
        db=db,
        step_range=step_range,
        top=top,
        peak_tflops=peak_tflops,
        peak_fp32_tflops=peak_fp32_tflops,
        peak_bandwidth_gbps=peak_bandwidth_gbps,
    )
