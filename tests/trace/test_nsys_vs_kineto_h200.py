"""The same Wan2.1 step captured both ways on the H200 (2026-11-30, `wanscope profile
--random-weights --profile-steps 1 --kernels triton`, once under torch.profiler and once with
`--nsys`, two runs of one device call): the two ingests agree.

Kineto (CUPTI's demangler) and nsys spell templated ATen names differently
(``(anonymous namespace)`` vs ``<unnamed>``, ``{lambda(int)#1}`` vs ``[lambda(int) (instance 1)]``),
so kernels are paired by launch order and must agree on the function name before the template
arguments; counts and times are then compared per Kineto name."""

import re
from collections import defaultdict
from pathlib import Path

import pytest

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

DATA = Path(__file__).resolve().parents[1] / "data"
KINETO = DATA / "h200_wan21_1p3b_triton_step1.json.gz"
NSYS = DATA / "h200_wan21_1p3b_triton_step1.sqlite"


def base_name(name: str) -> str:
    """Qualified function name without return type, template arguments or parameters."""
    name = re.sub(r"^(void|std::enable_if<.*?>::type)\s+", "", name)
    return re.split(r"[<(]", name, maxsplit=1)[0].replace("(anonymous namespace)", "<unnamed>")


@pytest.fixture(scope="module")
def kernels():
    out = []
    for path in (KINETO, NSYS):
        con = open_traces([path])
        out.append(con.execute("SELECT name, dur_ns FROM kernels ORDER BY start_ns").fetchall())
    return out


def test_same_kernels_in_the_same_order(kernels):
    k, n = kernels
    assert len(k) == len(n) == 1225
    assert [base_name(a) for a, _ in k] == [base_name(b) for b, _ in n]


def test_kernel_time_agrees_within_2_percent(kernels):
    k, n = kernels
    total_k, total_n = sum(d for _, d in k), sum(d for _, d in n)
    assert abs(total_n / total_k - 1) <= 0.02
    per_name = defaultdict(lambda: [0, 0, 0])
    for (name, dk), (_, dn) in zip(k, n):
        per_name[name][0] += 1
        per_name[name][1] += dk
        per_name[name][2] += dn
    big = {name: v for name, v in per_name.items() if v[1] > 0.01 * total_k}
    assert len(big) == 6  # cuDNN attention, three nvjet GEMMs, _add_norm_modulate, _rms_norm_rope
    for name, (_count, tk, tn) in big.items():
        assert abs(tn / tk - 1) <= 0.02, (name, tk, tn)


def test_analyses_agree(kernels):
    a, b = (analyze(open_traces([p])) for p in (KINETO, NSYS))
    (da,), (db,) = a["devices"], b["devices"]
    assert da["kernel_count"] == db["kernel_count"] == 1225
    assert da["memop_count"] == db["memop_count"] == 482
    share = {r["category"]: r["pct"] for r in da["categories"]}, {r["category"]: r["pct"] for r in db["categories"]}
    assert share[0]["attention"] == pytest.approx(share[1]["attention"], abs=0.5)
    assert da["utilization_pct"] == pytest.approx(db["utilization_pct"], abs=0.1)
