"""``cuda_api_sum``: CUDA runtime and driver calls grouped by name, by total host time.

NVIDIA's definition: each call's ``end - start`` on the host, grouped by name. The names
are those recorded (our ``api_calls.raw_name``) less a trailing ``_v`` + exactly four
digits: ``cudaLaunchKernel_v7000`` prints as ``cudaLaunchKernel`` but
``cudaStreamIsCapturing_v10000`` and ``cudaGetDeviceProperties_v2_v12000`` keep theirs
(as nsys 2023.4.4 prints them in the fixtures' golden output; ``analyze`` uses
``api_calls.name``, which drops any suffix of four or more digits). "Time (%)" is the
share of the summed API time; rows by total descending, then call count, then name.
"""

from __future__ import annotations

from wanscope.stats.report import NoDataError, Report
from wanscope.stats.summary import summarize

COLUMNS = [
    "Time (%)",
    "Total Time (ns)",
    "Num Calls",
    "Avg (ns)",
    "Med (ns)",
    "Min (ns)",
    "Max (ns)",
    "StdDev (ns)",
    "Name",
]


def cuda_api_sum(con) -> Report:
    """Raises NoDataError when no CUDA API call was captured."""
    rows = summarize(
        con,
        "SELECT regexp_replace(raw_name, '_v[0-9]{4}$', '') AS name, dur_ns AS value FROM api_calls",
        ["name"],
        "total DESC, n, name",
    )
    if not rows:
        raise NoDataError("no CUDA API calls in the input")
    return Report("cuda_api_sum", COLUMNS, rows)
