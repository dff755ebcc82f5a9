"""The operators' registrations (kernels/_dispatch.define_op): each implementation is the
registered kernel of its op, tagged pt2-compliant, and a backward through one raises instead
of leaving gradients unset."""

import importlib
import inspect

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
