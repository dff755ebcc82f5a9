"""``--compile``: the repeated DiT block compiles to one graph shared by every block, with no
graph break (the named ranges stand aside while Dynamo traces), and computes what eager does."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from wanscope.profile.driver import compile_blocks
from wanscope.wan.config import get_preset
from wanscope.wan.dit import WanDiT


def test_regional_compile_is_one_graph_without_breaks():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    cfg = get_preset("tiny").dit
    dit = WanDiT(cfg).init_weights().eval().requires_grad_(False)
    latents = torch.randn(1, 16, 2, 8, 8)  # [B, C, F, H, W]
    t, context = torch.tensor([500.0]), torch.randn(1, cfg.text_len, cfg.text_dim)
    with torch.no_grad():
        eager = dit(latents, t, context)
        compile_blocks(dit)
        compiled = dit(latents, t, context)
        again = dit(latents, t, context)
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1  # both blocks run the same compiled graph
    err = ((compiled - eager).abs().max() / eager.abs().max()).item()
    assert err < 1e-5, err
    assert torch.equal(compiled, again)
