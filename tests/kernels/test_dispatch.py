"""The operators' registrations (kernels/_dispatch.define_op): each implementation is the
registered kernel of its op, tagged pt2-compliant, and a backward through one raises instead
of leaving gradients unset."""

import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

OPS = [  # (module, implementation, operator)
    ("norm_modulate", "_norm_modulate_op", "norm_modulate"),
    ("norm_modulate", "_add_norm_modulate_op", "add_norm_modulate"),
    ("norm_modulate", "_gated_add_op", "gated_add"),
    ("rms_norm_rope", "_rms_norm_rope_op", "rms_norm_rope"),
    ("attention_hopper", "_attention_hopper_op", "attention_hopper"),
    ("attention_int8", "_attention_op", "attention_int8"),
    ("fp8_linear", "_quantize_op", "quantize_fp8_rows"),
    ("attention_flash", "_attention_flash_op", "attention_flash"),
]


@pytest.mark.parametrize(("module", "impl", "op"), OPS)
def test_registered_and_tagged(module, impl, op):
    fn = getattr(importlib.import_module(f"wanscope.kernels.{module}"), impl)
    overload = getattr(torch.ops.wanscope, op).default
    assert overload._schema.name == f"wanscope::{op}"
    assert [a.name for a in overload._schema.arguments] == list(inspect.signature(fn).parameters)
    assert torch.Tag.pt2_compliant_tag in overload.tags


def test_backward_raises():
    from wanscope.kernels import gated_add

    x = torch.randn(1, 4, 8, requires_grad=True)
    y = torch.randn(1, 4, 8)
    out = gated_add(x, y, torch.ones(1, 8))
    with pytest.raises(RuntimeError, match="wanscope::gated_add has no backward formula"):
        out.sum().backward()


# The CPU wheel of torch brings no Triton: the VAE decoder's convolution input, and the kernels
# package that holds it, must then run their torch reference (`wanscope profile` on a CPU
# machine decodes through it). Triton is blocked in a fresh interpreter (this one has it).
_NO_TRITON = """
import json
import sys
sys.modules["triton"] = None  # import triton raises ImportError
import torch
import torch.nn.functional as F
import wanscope.kernels
from wanscope.wan.vae_decoder import CausalConv3d, RMSNorm
torch.manual_seed(0)
conv, norm = CausalConv3d(6, 5, 3), RMSNorm(6)
with torch.no_grad():
    norm.gamma.uniform_(0.5, 1.5)
    x = torch.randn(1, 6, 4, 5, 7)
    out = conv(x, {}, norm)
    y = F.silu(F.normalize(x, dim=1) * 6**0.5 * norm.gamma)
    expected = F.conv3d(F.pad(y, (0, 0, 0, 0, 2, 0)), conv.weight, conv.bias, padding=(0, 1, 1))
print(json.dumps({"shape": list(out.shape), "err": float((out - expected).abs().max())}))
"""


def test_the_vae_convolution_input_runs_without_triton():
    run = subprocess.run(
        [sys.executable, "-c", _NO_TRITON], capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "0"}
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["shape"] == [1, 5, 4, 5, 7]
    assert got["err"] < 1e-5
