"""``--ncu attention`` plumbing without a GPU: the kernel-name regex of each backend against the
real H200 kernel names, and a capture through a stand-in ncu that replays the H200 FA2 capture
(tests/data/ncu) so the diagnosis path runs end to end."""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path

import pytest

from wanscope.errors import UsageError
from wanscope.profile.ncu import capture_attention, kernel_regex

DATA = Path(__file__).resolve().parents[1] / "data" / "ncu"
# kernel names from ncu on the H200 (tests/data/ncu) and docs/design.md, "Capturing"
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"
FA2 = (
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, 0, 0, bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, bfloat16_t>>, 0, 0, 0, 0, 0, 1, 0, 0>(Flash_fwd_params)"
)
EFFICIENT = "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)"
HOPPER = "_attention_hopper_fwd_kernel"  # ours, as the profiled DiT forward shows it (benchmarks/RESULTS.md)
NOT_ATTENTION = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>",
    "cudnn::engines_precompiled::nchwToNhwcKernel",
    "triton_poi_fused_add_gelu_3",
]


@pytest.mark.parametrize(
    "backend, matches",
    [
        ("flash", [FA2]),
        ("cudnn", [CUDNN]),
        ("efficient", [EFFICIENT]),
        ("sdpa", [FA2, CUDNN, EFFICIENT]),
        ("hopper", [HOPPER]),
        ("auto", [FA2, CUDNN, EFFICIENT, HOPPER]),
    ],
)
def test_kernel_regex_matches_its_backend_only(backend, matches):
    rx = re.compile(kernel_regex(backend))
    for name in [FA2, CUDNN, EFFICIENT, HOPPER, *NOT_ATTENTION]:
        assert bool(rx.search(name)) == (name in matches), name


def test_math_backend_has_no_attention_kernel():
    with pytest.raises(UsageError, match="the math backend runs no attention kernel"):
        kernel_regex("math")


FAKE_NCU = """#!{python}
import json, os, sys
args = sys.argv[1:]
if "--import" in args:  # export a page of the report: replay the H200 capture
    page = args[args.index("--page") + 1]
    sys.stdout.write(open(os.path.join({data!r}, "h200_fa2_attn_480p." + page + ".csv")).read())
else:
    open(os.environ["FAKE_NCU_LOG"], "w").write(json.dumps(args))
    open(args[args.index("--export") + 1] + ".ncu-rep", "w").write("not a report")
"""


def test_capture_attention_runs_ncu_on_one_launch_and_diagnoses_it(tmp_path, monkeypatch):
    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable, data=str(DATA)))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NCU", str(exe))
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "args.json"))
    child = [sys.executable, "-m", "wanscope", "profile", "--child", "ncu"]
    files, diagnoses = capture_attention(child, "flash", tmp_path)
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[args.index("--kernel-name") + 1] == "regex:flash_fwd"
    assert args[args.index("--launch-skip") + 1] == "0" and args[args.index("--launch-count") + 1] == "1"
    assert args[args.index("--clock-control") + 1] == "none"
    assert args[-len(child) :] == child
    assert (files.report, files.raw_csv) == (tmp_path / "attention.ncu-rep", tmp_path / "attention.raw.csv")
    (d,) = [d.to_json() for d in diagnoses]
    assert (d["verdict"], d["registers_per_thread"], d["block_size"]) == ("latency-bound", 255, 128)
    assert "flash_fwd_kernel" in d["name"]
