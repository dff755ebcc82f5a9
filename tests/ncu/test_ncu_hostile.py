"""Hostile inputs to ``wanscope ncu``: Nsight Compute CSVs truncated, with the wrong
delimiter, from another tool or another encoding, special files, and bad regexes: one
line naming the file (or the option), exit code 2, no traceback, no hang."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile_cli import REPO, assert_one_line_error, run_cli

CSV = REPO / "tests" / "data" / "ncu" / "h200_fa2_attn_480p.details.csv"
RAW = REPO / "tests" / "data" / "ncu" / "h200_fa2_attn_480p.raw.csv"


def diagnosis(path) -> dict:
    r = run_cli("ncu", path, "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "report.csv"
    os.mkfifo(fifo)
    assert_one_line_error(run_cli("ncu", fifo), fifo, "not a regular file")


def test_endless_device_is_refused():
    assert_one_line_error(run_cli("ncu", "/dev/zero", memory_gb=2), "/dev/zero", "not a regular file")


def test_directory(tmp_path):
    assert_one_line_error(run_cli("ncu", tmp_path), tmp_path)


@pytest.mark.parametrize("source", [CSV, RAW])
def test_byte_order_mark_is_fine(tmp_path, source):
    """Excel and Windows tools save CSV as UTF-8 with a BOM."""
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    a, b = diagnosis(source), diagnosis(bom)
    assert a["kernels"] == b["kernels"]


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b.replace(b'","', b'";"'), "semicolons"),
        (lambda b: b.replace(b'","', b'"\t"'), "tabs"),
        (lambda b: b"name,value\nfoo,1\n", "not an Nsight Compute CSV"),
        (lambda b: b.decode().encode("utf-16"), "not text"),
        (lambda b: b.split(b"\n")[0] + b"\n", "no rows"),
        (lambda b: b + b'"1","x\n', "malformed CSV"),
        (lambda b: b"", "empty"),
    ],
)
def test_malformed_csv(tmp_path, mutate, problem):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(mutate(CSV.read_bytes()))
    assert_one_line_error(run_cli("ncu", bad), bad, problem)


@pytest.mark.parametrize(
    "args, option",
    [
        (["--kernel", "("], "--kernel"),
        (["--kernel-b", "["], "--kernel-b"),
        (["--kernel", "flash", "--kernel-b", "(?P<"], "--kernel-b"),
    ],
)
def test_bad_regex_names_its_option(args, option):
    line = assert_one_line_error(run_cli("ncu", CSV, CSV, *args), option)
    assert line.startswith(f"wanscope: error: {option} ")


def test_truncated_ncu_rep(tmp_path):
    from shared_fixtures import shared_fixture

    rep = shared_fixture("ncu/esmm_049ec61_profile_a10g.ncu-rep")
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(rep.read_bytes()[:100])
    assert_one_line_error(run_cli("ncu", cut), cut)


def _raw_with(tmp_path, values: dict, source=RAW) -> Path:
    import csv
    import io

    rows = list(csv.reader(io.StringIO(source.read_text())))
    for metric, value in values.items():
        col = rows[0].index(metric)
        for row in rows[2:]:
            row[col] = value
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    bad = tmp_path / "raw.csv"
    bad.write_text(buf.getvalue())
    return bad


INTEGER_METRICS = [
    "launch__registers_per_thread",
    "launch__block_size",
    "launch__grid_size",
    "launch__shared_mem_config_size",
    "launch__shared_mem_per_block_static",
    "launch__sm_count",
]


@pytest.mark.parametrize("metric", INTEGER_METRICS)
@pytest.mark.parametrize("value", ["inf", "99999999999999999999999"])
def test_absurd_metric_values_still_diagnose(tmp_path, metric, value):
    """An integer quantity of inf crashed the diagnosis (int(inf)); 10^23 registers per
    thread made the what-if walk count down from 10^23 (a hang). Garbage in a cell gives
    a diagnosis with less in it, never a traceback or a hang."""
    bad = _raw_with(tmp_path, {metric: value})
    for args in ([bad], [bad, RAW]):
        r = run_cli("ncu", *args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])


@pytest.mark.parametrize("value", ["nan", "-1", "0", "-inf", "1e999"])
def test_every_integer_metric_absurd_at_once(tmp_path, value):
    bad = _raw_with(tmp_path, {m: value for m in [*INTEGER_METRICS, "gpu__time_duration.sum"]})
    for args in ([bad], [bad, "--format", "json"], [bad, RAW]):
        r = run_cli("ncu", *args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])


@pytest.mark.parametrize(
    "metric", ["launch__block_dim_x", "launch__grid_dim_y", "device__attribute_compute_capability_major"]
)
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_absurd_dimensions_in_an_old_raw_page(tmp_path, metric, value):
    """ncu 2022.3's raw page has no Block/Grid Size columns: they come from the per-axis
    metrics (int(inf) crashed the reader)."""
    from shared_fixtures import shared_fixture

    old = shared_fixture("ncu/derived/esmm_049ec61_profile_a10g.raw.ncu2022.3.0.csv")
    bad = _raw_with(tmp_path, {metric: value}, source=old)
    r = run_cli("ncu", bad, "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
