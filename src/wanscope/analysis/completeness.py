"""What a capture's own records say is missing from it: incomplete captures must not pass as
complete. Each finding is a ``warnings`` kind with a count and one ``notes`` sentence:

- ``no_kernel_records``: kernel or graph launches and not one kernel record (captured without
  the GPU activities: torch.profiler without ``ProfilerActivity.CUDA``, ``nsys`` without
  ``-t cuda``, or a kernel table the export lacks); the count is the launches.
- ``launch_without_kernel``: kernel launches (runtime or driver API, CUDA or HIP) whose
  correlation id has no GPU record in the same process: their kernels were dropped (a full
  activity buffer, a window cut short), or excluded at ingest as malformed (counted there
  too), and utilization undercounts.
- ``graph_launch_without_kernels``: the same for graph launches (``cudaGraphLaunch``,
  ``cuGraphLaunch``, ``hipGraphLaunch``), whose kernels carry the launch's correlation id
  (CUPTI's correlation of graph kernels).
- ``step_without_gpu``: steps of a rank that ran GPU work whose CPU range launched none.
- ``stack_without_python_frames``: inputs whose header says ``with_stack`` and that hold no
  Python frame (the stacks are then aten ops and annotations only); the count is the inputs.

Graph-level Nsight Systems records (``graph_trace``) are counted at ingest
(``trace/nsys.py``) and their note is here. Times play no part: these are counts.
"""

from __future__ import annotations

KERNEL_LAUNCHES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernelMultiDevice",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
    "hipModuleLaunchCooperativeKernel",
)
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _launches(con) -> list[tuple[str, bool, int, int]]:
    """(API name, is a graph launch, calls, calls without a kernel record) per launch API."""
    return con.execute(
        f"""
        WITH k AS (SELECT rank, pid, correlation FROM kernels WHERE correlation IS NOT NULL
                   UNION SELECT rank, pid, correlation FROM memops WHERE correlation IS NOT NULL)
        SELECT a.name, a.name IN ({_names(GRAPH_LAUNCHES)}), count(*), count(*) FILTER (k.correlation IS NULL)
        FROM api_calls a
        LEFT JOIN k ON k.rank = a.rank AND k.pid IS NOT DISTINCT FROM a.pid AND k.correlation = a.correlation
        WHERE a.name IN ({_names(KERNEL_LAUNCHES + GRAPH_LAUNCHES)})
        GROUP BY ALL ORDER BY a.name
        """
    ).fetchall()


def _launch_findings(con) -> tuple[dict[str, int], list[str]]:
    rows = _launches(con)
    if not rows:
        return {}, []
    (kernels,) = con.execute("SELECT count(*) FROM kernels").fetchone()
    if kernels == 0:
        calls = sum(r[2] for r in rows)
        listed = ", ".join(f"{n:,} {name}" for name, _, n, _ in rows)
        return {"no_kernel_records": calls}, [
            f"the capture has {calls:,} kernel launches ({listed}) and no kernel record: it was made without "
            "the GPU activities (torch.profiler's ProfilerActivity.CUDA, nsys -t cuda), so there is no GPU "
            "time to analyze (warnings: no_kernel_records)"
        ]
    warns: dict[str, int] = {}
    notes = []
    for name, graph, calls, missing in rows:
        if not missing:
            continue
        kind = "graph_launch_without_kernels" if graph else "launch_without_kernel"
        warns[kind] = warns.get(kind, 0) + missing
        notes.append(
            f"{missing:,} of {calls:,} {name} calls have no kernel records: their kernels were not captured "
            f"(or were excluded at ingest) and utilization undercounts (warnings: {kind})"
        )
    return warns, notes


def _steps_without_gpu(steps: list[dict], gpu_ranks: set[int]) -> tuple[dict[str, int], list[str]]:
    empty = [s for s in steps if s["rank"] in gpu_ranks and s["gpu_dur_ns"] is None]
    if not empty:
        return {}, []
    listed = ", ".join(f"{s['step']} (rank {s['rank']})" for s in empty[:5]) + (", ..." if len(empty) > 5 else "")
    return {"step_without_gpu": len(empty)}, [
        f"{len(empty):,} step{'s' if len(empty) != 1 else ''} of ranks that ran GPU work launched no GPU work "
        f"in {'their' if len(empty) != 1 else 'its'} CPU range: {listed}; "
        "their GPU times are missing (warnings: step_without_gpu)"
    ]


def _stacks_without_frames(con) -> tuple[dict[str, int], list[str]]:
    paths = [
        path
        for (path,) in con.execute(
            """SELECT s.path FROM sources s JOIN meta m ON m.source_id = s.source_id AND m.key = 'with_stack'
               WHERE lower(m.value) IN ('1', 'true')
                 AND NOT EXISTS (SELECT 1 FROM cpu_ops c WHERE c.rank = s.rank AND c.kind = 'python')
               ORDER BY s.source_id"""
        ).fetchall()
    ]
    if not paths:
        return {}, []
    return {"stack_without_python_frames": len(paths)}, [
        f"{path}: its header says with_stack, but it holds no Python frame: the call stacks are aten ops and "
        "annotations only (warnings: stack_without_python_frames)"
        for path in paths
    ]


def graph_trace_note(warns: dict[str, int]) -> list[str]:
    n = warns.get("graph_trace", 0)
    if not n:
        return []
    return [
        f"{n:,} CUDA graph run{'s were' if n != 1 else ' was'} traced at graph level (nsys --cuda-graph-trace=graph): "
        "each is one record without its kernels, counted as busy time and listed as one kernel "
        "'CUDA graph N (graph-level trace)'; capture with --cuda-graph-trace=node for the kernels "
        "(warnings: graph_trace)"
    ]


def completeness(con, steps: list[dict], gpu_ranks: set[int]) -> tuple[dict, list]:
    """The findings above: (warnings by kind, notes). The launches and frames over the whole
    capture; the steps those in scope (``analyze``'s ``steps``), of the ``gpu_ranks`` (ranks
    with GPU activity anywhere in the trace)."""
    warns: dict[str, int] = {}
    notes: list[str] = []
    for w, n in (_launch_findings(con), _steps_without_gpu(steps, gpu_ranks), _stacks_without_frames(con)):
        warns.update(w)
        notes += n
    return warns, notes
