"""wanscope ncu / ncu-run through the CLI entry point: output shape, verdicts, one-line
errors with exit code 2 for malformed input."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from ncu_fixtures import DERIVED, FIXTURES, REPS, fixture, needs_ncu_report

from wanscope.cli import main

NSIGHTFUL = FIXTURES / "nsightful_copy_blocked.details.csv"
CUTLASS_DETAILS = DERIVED / "cutlass_panjd123_0667dc2e_report_a100.details.ncu2024.1.1.csv"
NSYS_CSV = (
    FIXTURES.parent
    / "nsys"
    / "expected_nsys2023.4.4"
    / "fuser_64ee035dc_report1_h200_test_matmul"
    / "cuda_gpu_kern_sum.csv"
)


def run(capsys, *args) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *args) -> dict:
    code, out, err = run(capsys, *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


REQUIRED_KEYS = {
    "id",
    "name",
    "registers_per_thread",
    "block_size",
    "grid_size",
    "theoretical_occupancy_pct",
    "achieved_occupancy_pct",
    "warps_active_per_scheduler",
    "warps_eligible_per_scheduler",
    "issue_slot_utilization_pct",
    "verdict",
    "explanation",
    "what_if",
}


def test_json_shape_and_cutlass_launch_bound(capsys):
    """A100 CUTLASS GEMMs: 96 blocks on 108 SMs, 0.44 / 0.44 / 0.89 waves: launch/tail-bound,
    as ncu's own SOLBottleneck row says ("only 0.4 full waves", "only 0.9 full waves")."""
    doc = run_json(capsys, "ncu", str(fixture(CUTLASS_DETAILS)))
    assert doc["schema_version"] == 1
    ks = doc["kernels"]
    assert [k["verdict"] for k in ks] == ["launch/tail-bound"] * 3
    assert [k["waves_per_sm"] for k in ks] == [0.44, 0.44, 0.89]
    assert all(REQUIRED_KEYS <= set(k) for k in ks)
    k = ks[0]
    assert (k["registers_per_thread"], k["block_size"], k["grid_size"]) == (188, 128, 96)
    assert (k["theoretical_occupancy_pct"], k["achieved_occupancy_pct"]) == (12.5, 6.0)
    assert (k["warps_active_per_scheduler"], k["warps_eligible_per_scheduler"], k["issue_slot_utilization_pct"]) == (
        1.0,
        0.21,
        20.57,
    )
    assert "96 blocks for 108 SMs (0.44 waves per SM)" in k["explanation"]
    assert "32 x 188 = 6,016 registers round up to 6,144 per warp" in k["explanation"]
    assert "2 warps fit per scheduler and 8 per SM" in k["explanation"]
    assert "12.50% theoretical occupancy (limited by registers and shared memory)" in k["explanation"]
    assert {"if_registers_per_thread", "if_block_size", "occupancy_pct"} == set(k["what_if"][0])


def test_every_fixture_kernel_gets_a_verdict(capsys):
    """A verdict for every kernel with data; the failed sglang flash kernel reported as failed."""
    needs_ncu_report()
    expected = {
        "sglang": ["compute-bound", "launch/tail-bound", "compute-bound", "compute-bound", "profiling failed"],
        "cutlass": ["launch/tail-bound"] * 3,
        # --metrics all without sections: no throughput, so only the launch rules can speak
        "esmm": ["undetermined"] * 4
        + ["launch/tail-bound"] * 2
        + ["undetermined"]
        + ["launch/tail-bound"] * 3
        + ["undetermined"] * 2,
    }
    for key, verdicts in expected.items():
        doc = run_json(capsys, "ncu", str(fixture(REPS[key])))
        assert [k["verdict"] for k in doc["kernels"]] == verdicts, key
    failed = run_json(capsys, "ncu", str(REPS["sglang"]), "--kernel", "flash_fwd")["kernels"]
    assert len(failed) == 1
    assert failed[0]["verdict"] == "profiling failed"
    assert failed[0]["explanation"].startswith("ncu collected no values")
    assert failed[0]["what_if"] == []


def test_memory_bound_copy_kernel(capsys):
    (k,) = run_json(capsys, "ncu", str(fixture(NSIGHTFUL)))["kernels"]
    assert k["verdict"] == "memory-bound"
    assert (k["sm_throughput_pct"], k["memory_throughput_pct"]) == (1.3, 61.84)
    assert k["top_stalls"][0]["cycles_per_issued_instruction"] == 491.9
    assert "100% theoretical occupancy (limited by warps)" in k["explanation"]


def test_sglang_compute_bound_with_what_if(capsys):
    needs_ncu_report()
    k = run_json(capsys, "ncu", str(fixture(REPS["sglang"])), "--kernel", "distribution")["kernels"][0]
    assert k["verdict"] == "compute-bound"
    assert k["sm_throughput_pct"] == pytest.approx(61.92466, abs=1e-5)
    # 40 registers -> 48 warps; at 32 registers every partition holds 16 warps: 100%
    assert k["what_if"][0] == {"if_registers_per_thread": 32, "if_block_size": 256, "occupancy_pct": 100.0}
    assert {"if_registers_per_thread": 40, "if_block_size": 1024, "occupancy_pct": 50.0} in k["what_if"]


def test_table_output(capsys):
    code, out, _ = run(capsys, "ncu", str(fixture(CUTLASS_DETAILS)), "--kernel", "Kernel")
    assert code == 0
    assert out.count("verdict: launch/tail-bound") == 3
    assert "block limit: registers" in out and "what if" in out


def test_compare_two_reports(capsys):
    needs_ncu_report()
    doc = run_json(
        capsys,
        "ncu",
        str(fixture(REPS["cutlass"])),
        str(REPS["sglang"]),
        "--kernel",
        "Kernel",
        "--kernel-b",
        "elementwise",
    )
    assert doc["a"]["id"] == 2  # the longest CUTLASS GEMM (25,984 ns)
    assert doc["b"]["id"] in (0, 2, 3)
    rows = {r["metric"]: r for r in doc["rows"]}
    assert rows["registers per thread"]["a"] == 254 and rows["registers per thread"]["b"] == 40
    assert rows["duration (ns)"]["b_over_a"] == pytest.approx(doc["b"]["duration_ns"] / 25984.0)
    assert rows["verdict"]["a"] == "launch/tail-bound"
    code, out, _ = run(capsys, "ncu", str(REPS["cutlass"]), str(REPS["cutlass"]), "--kernel", "Kernel")
    assert code == 0 and "B takes 1.00x the time of A" in out


def _one_line_error(capsys, *args, match: str):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("wanscope: error: ")
    assert match in lines[0]
    assert "Traceback" not in err


def test_truncated_csv(tmp_path, capsys):
    text = fixture(NSIGHTFUL).read_text()
    cut = tmp_path / "truncated.csv"
    cut.write_text(text[: len(text) // 2])
    _one_line_error(capsys, "ncu", str(cut), match="truncated")
    # cut exactly at a line end, inside a row's fields
    lines = text.splitlines(keepends=True)
    short = tmp_path / "short_row.csv"
    short.write_text("".join(lines[:10]) + lines[10].rsplit(",", 3)[0] + "\n")
    _one_line_error(capsys, "ncu", str(short), match="fields")


def test_wrong_delimiter(tmp_path, capsys):
    semi = tmp_path / "semicolon.csv"
    semi.write_text(fixture(NSIGHTFUL).read_text().replace('","', '";"'))
    _one_line_error(capsys, "ncu", str(semi), match="separated by semicolons")


def test_other_tools_csv(capsys):
    _one_line_error(capsys, "ncu", str(fixture(NSYS_CSV)), match="not an Nsight Compute CSV")


def test_missing_file_bad_regex_and_no_match(tmp_path, capsys):
    _one_line_error(capsys, "ncu", str(tmp_path / "nope.csv"), match="cannot read")
    _one_line_error(capsys, "ncu", str(fixture(NSIGHTFUL)), "--kernel", "(", match="not a regular expression")
    _one_line_error(capsys, "ncu", str(NSIGHTFUL), "--kernel", "gemm", match="no kernel name matches")


def test_corrupt_ncu_rep(tmp_path, capsys):
    needs_ncu_report()
    bad_rep = tmp_path / "bad.ncu-rep"
    bad_rep.write_bytes(b"NVR\x00" + b"\x00" * 64)
    _one_line_error(capsys, "ncu", str(bad_rep), match="no profiled kernels")


def test_ncu_run_without_ncu(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NCU", str(tmp_path / "no-ncu-here"))
    _one_line_error(capsys, "ncu-run", "--kernel", "x", "--", "python", "-c", "pass", match="ncu not found")


def _fake_ncu(tmp_path, body: str):
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_ncu_run_without_counter_access(tmp_path, capsys):
    exe = _fake_ncu(
        tmp_path,
        'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."\nexit 1\n',
    )
    code, out, err = run(capsys, "ncu-run", "--ncu", str(exe), "--", "true")
    # ncu's own output is passed through on stderr; wanscope's error is one last line
    assert code == 2 and out == "" and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("wanscope: error: ncu has no access to the GPU performance counters")


def test_ncu_run_end_to_end_with_a_stand_in_ncu(tmp_path, capsys):
    """A stand-in ncu that records its arguments, 'writes' a report by copying a fixture
    and exports the fixture's CSVs: checks the command line and the diagnosis printed."""
    needs_ncu_report()
    args_log = tmp_path / "args.txt"
    exe = _fake_ncu(
        tmp_path,
        f'echo "$@" >> {args_log}\n'
        'case " $* " in\n'
        f'  *" --import "*"--page raw"*) cat {DERIVED / "cutlass_panjd123_0667dc2e_report_a100.raw.base.ncu2024.1.1.csv"} ;;\n'
        f'  *" --import "*) cat {DERIVED / "cutlass_panjd123_0667dc2e_report_a100.details.base_names.ncu2024.1.1.csv"} ;;\n'
        '  *) while [ "$1" != "--export" ]; do shift; done; '
        f'cp {fixture(REPS["cutlass"])} "$2.ncu-rep"; echo "==PROF== Disconnected" ;;\n'
        "esac\n",
    )
    out_stem = tmp_path / "cap" / "gemm"
    code, out, err = run(
        capsys,
        "ncu-run",
        "--ncu",
        str(exe),
        "--kernel",
        "Kernel",
        "--launch-skip",
        "2",
        "-o",
        str(out_stem),
        "--format",
        "json",
        "--",
        "python",
        "bench.py",
        "--flag",
    )
    assert code == 0, err
    doc = json.loads(out)
    first = args_log.read_text().splitlines()[0].split()
    assert first[:5] == ["--clock-control", "none", "--target-processes", "all", "--kernel-name"]
    assert first[5] == "regex:Kernel"
    assert first[first.index("--launch-skip") + 1] == "2" and first[first.index("--launch-count") + 1] == "1"
    assert [first[i + 1] for i, a in enumerate(first) if a == "--section"] == [
        "SpeedOfLight",
        "LaunchStats",
        "Occupancy",
        "SchedulerStats",
        "WarpStateStats",
        "ComputeWorkloadAnalysis",
        "MemoryWorkloadAnalysis",
        "SourceCounters",
    ]
    assert first[-3:] == ["python", "bench.py", "--flag"]
    assert (tmp_path / "cap" / "gemm.details.csv").stat().st_size == os.path.getsize(
        DERIVED / "cutlass_panjd123_0667dc2e_report_a100.details.base_names.ncu2024.1.1.csv"
    )
    assert [k["verdict"] for k in doc["kernels"]] == ["launch/tail-bound"] * 3


def test_ncu_side_never_imports_torch():
    import subprocess

    code = (
        "import sys\n"
        "from wanscope.cli import main\n"
        f"try:\n    main(['ncu', {str(fixture(NSIGHTFUL))!r}, '--format', 'json'])\n"
        "except SystemExit:\n    pass\n"
        "import wanscope.ncu.capture, wanscope.ncu.compare\n"
        "sys.stderr.write('torch' if 'torch' in sys.modules else 'clean')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stderr == "clean"
    assert json.loads(proc.stdout)["kernels"][0]["verdict"] == "memory-bound"
