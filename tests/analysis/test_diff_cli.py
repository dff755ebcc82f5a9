"""``wanscope diff`` end to end: formats, --fail-if-slower exit codes, warnings, bad input
as one line with exit code 2, and no torch import."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_context import run_main as run_cli
from synthetic_traces import base_and_new, cpu_base_and_new, kernel, launch, write_trace


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return base_and_new(tmp_path_factory.mktemp("traces"))


def test_json(paths):
    r = run_cli("diff", *paths, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 2
    assert (doc["base"]["time_ns"], doc["new"]["time_ns"]) == (77_500, 60_000)
    assert doc["base"]["label"] == str(paths[0])
    assert set(doc["fused_kernels"][0]) >= {"name", "kind", "ops", "count", "total_ns"}
    assert set(doc["categories"][0]) >= {"category", "base_ns", "new_ns", "base_pct", "new_pct"}
    assert r.stderr == ""


def test_table(paths):
    r = run_cli("diff", *paths)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "time (mean step GPU time)" in out and "77.5 us" in out and "60.0 us" in out
    assert "(-22.58%)" in out
    assert "attention share of kernel time: 57.14% -> 69.57% (+12.42 pp)" in out
    assert "fused Triton kernels in NEW" in out and "add, mul" in out and "mean, pow" in out
    assert "ops fused in NEW" in out


@pytest.mark.parametrize("pct, code", [(None, 0), (0, 1), (25, 1), (29.1, 1), (29.2, 0), (100, 0)])
def test_fail_if_slower_when_new_is_slower(paths, pct, code):
    # Swapped, NEW (77.5 us per step) is 29.1667% slower than BASE (60 us).
    args = ["diff", paths[1], paths[0], "--format", "json"]
    if pct is not None:
        args += ["--fail-if-slower", pct]
    r = run_cli(*args)
    assert r.returncode == code, r.stderr
    assert json.loads(r.stdout)["delta"]["time_change_pct"] == 29.1667
    if code:
        assert r.stderr.strip() == (
            f"wanscope: NEW is 29.17% slower than BASE (mean step GPU time), more than --fail-if-slower {pct:g}%"
        )


def test_fail_if_slower_when_new_is_faster(paths):
    assert run_cli("diff", *paths, "--fail-if-slower", "0", "--format", "json").returncode == 0


def test_fail_if_slower_without_gpu_work_is_an_error(tmp_path, paths):
    cpu_only = write_trace(
        tmp_path / "cpu.json",
        [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {}}],
    )
    r = run_cli("diff", cpu_only, paths[1], "--fail-if-slower", "5", "--format", "json")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "wanscope: error: --fail-if-slower: the times cannot be compared: NEW has GPU activity and BASE none "
        "(a GPU time does not compare with a CPU one)"
    )
    r = run_cli("diff", cpu_only, cpu_base_and_new(tmp_path)[1], "--fail-if-slower", "5", "--format", "json")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "wanscope: error: --fail-if-slower: the times cannot be compared: neither trace has GPU activity and "
        "BASE has no steps whose CPU time could compare instead"
    )


def test_two_cpu_runs_compare_and_fail_on_step_cpu_time(tmp_path):
    base, new = cpu_base_and_new(tmp_path)  # mean step CPU time 110 -> 82.5 us
    assert run_cli("diff", base, new, "--fail-if-slower", "0", "--format", "json").returncode == 0
    r = run_cli("diff", new, base, "--fail-if-slower", "5", "--format", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["delta"]["time_change_pct"] == 33.3333
    assert r.stderr.strip().splitlines()[-1] == (
        "wanscope: NEW is 33.33% slower than BASE (mean step CPU time), more than --fail-if-slower 5%"
    )
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "diff", str(base), str(new)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # rows on one line each
    assert r.returncode == 0, r.stderr
    assert re.search(r"time \(mean step CPU time\) +│ 110\.0 us +│ 82\.5 us +│ -27\.5 us \(-25\.00%\)", r.stdout)
    assert re.search(r"steps +│ 2 +│ 2 +│ \+0", r.stdout)
    assert "kernels and time by category: no GPU activity in either trace" in r.stdout
    assert "0 names" not in r.stdout and "kernels only in" not in r.stdout  # no empty tables


def test_empty_kernel_lists_are_one_line_not_an_empty_table(paths):
    r = run_cli("diff", paths[1], paths[1])
    assert r.returncode == 0, r.stderr
    assert "kernels only in NEW: none" in r.stdout.splitlines()
    assert "kernels only in BASE: none" in r.stdout.splitlines()


def test_nothing_in_common_warns(tmp_path, paths):
    other = write_trace(tmp_path / "other.json", [launch(5000, 1), kernel("my_custom_kernel", 5010, 7, 1)])
    warning = "BASE and NEW share no kernel names: they may be different workloads; totals and shares still compare"
    r = run_cli("diff", paths[0], other, "--format", "json")
    assert r.returncode == 0
    assert warning in json.loads(r.stdout)["warnings"]
    assert f"wanscope: warning: {warning}" in r.stderr.splitlines()
    r = run_cli("diff", paths[0], other)
    assert r.returncode == 0 and "share no kernel names" in r.stdout


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        (b"hello\n", "not a trace"),
        (b'{"traceEvents": [ {"ph": "X", "cat": "kernel"', "truncated or malformed JSON"),
        (b"", "empty file"),
    ],
)
def test_bad_file_is_one_line_exit_2(tmp_path, paths, content, message):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    for args in ((bad, paths[1]), (paths[0], bad)):
        r = run_cli("diff", *args)
        assert r.returncode == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"wanscope: error: {bad}: ") and message in lines[0]
        assert "Traceback" not in r.stderr


def test_out_goes_with_html(tmp_path, paths):
    r = run_cli("diff", *paths, "--format", "html")
    assert r.returncode == 2 and r.stderr.strip() == "wanscope: error: --format html needs --out FILE"
    refused = "wanscope: error: --out is for --format html (implied when --out ends in .html and --format is not given)"
    for args in (
        ["--out", tmp_path / "x.json"],
        ["--format", "json", "--out", tmp_path / "x.html"],
        ["--format", "table", "--out", tmp_path / "x.html"],
    ):
        r = run_cli("diff", *paths, *args)
        assert r.returncode == 2 and r.stderr.strip() == refused
    assert not list(tmp_path.iterdir())


def test_an_html_out_implies_the_html_format(tmp_path, paths):
    out = tmp_path / "x.HTML"
    r = run_cli("diff", *paths, "--out", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"wrote {out}")
    assert "57.14% &rarr; 69.57%" in out.read_text()


def test_html_file(tmp_path, paths):
    out = tmp_path / "sub" / "diff.html"
    r = run_cli("diff", *paths, "--format", "html", "--out", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"wrote {out}")
    page = out.read_text()
    assert "<script src=" not in page  # plotly.js inlined
    assert "57.14% &rarr; 69.57%" in page and "triton_red_fused_mean_pow_1" in page
    assert not list(out.parent.glob(".diff.html.*"))


def test_diff_never_imports_torch(paths):
    code = (
        "import sys; from wanscope.cli import main; "
        f"main(['diff', {str(paths[0])!r}, {str(paths[1])!r}, '--format', 'json']); "
        "sys.stderr.write('TORCH_LOADED=%s' % ('torch' in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "TORCH_LOADED=False" in r.stderr


def test_readme_documents_the_command_and_every_json_field(paths):
    repo = Path(__file__).resolve().parents[2]
    assert "| `wanscope diff BASE NEW` |" in (repo / "README.md").read_text()
    section = (repo / "docs" / "json.md").read_text().split("## diff JSON", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)(?:\[\])?`(?:, `([a-z_]+)`)?", section, re.M))
    documented = {name for pair in documented for name in pair if name}
    doc = json.loads(run_cli("diff", *paths, "--format", "json").stdout)
    assert set(doc) == documented
