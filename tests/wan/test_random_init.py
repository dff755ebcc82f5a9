"""Random models are built on the meta device and initialized in their target dtype: every
parameter gets a value (none is left as ``to_empty``'s uninitialized memory), in the dtype a
checkpoint's load gives it, with the initialization's statistics."""

import math

import torch

from wanscope.wan.config import get_preset
from wanscope.wan.dit import WanDiT, keeps_fp32
from wanscope.wan.text_encoder import load_umt5


def test_init_weights_writes_every_parameter_of_the_dit():
    cfg = get_preset("tiny").dit
    with torch.device("meta"):
        model = WanDiT(cfg)
    model.to_empty(device="cpu")
    for p in model.parameters():
        p.data.fill_(math.nan)
    torch.manual_seed(0)
    model.init_weights()
    left = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    assert left == []
    mod = model.blocks[0].modulation
    assert abs(mod.float().std().item() * cfg.dim**0.5 - 1) < 0.15  # N(0, 1/dim)
    assert model.blocks[0].self_attn.norm_q.weight.eq(1).all()


def test_random_dit_is_built_in_its_dtype():
    cfg = get_preset("tiny").dit
    torch.manual_seed(0)
    a = WanDiT.random(cfg, torch.bfloat16, "cpu")
    torch.manual_seed(0)
    b = WanDiT.random(cfg, torch.bfloat16, "cpu")
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert p.dtype == (torch.float32 if keeps_fp32(name) else torch.bfloat16), name
        assert p.device.type == "cpu" and torch.isfinite(p).all() and torch.equal(p, q), name
    lin = a.blocks[0].ffn[0].weight
    bound = math.sqrt(6 / sum(lin.shape))  # Xavier-uniform
    assert lin.abs().max().item() <= bound * 1.01 and lin.float().std().item() > bound / 3


def test_random_text_encoder_is_built_in_its_dtype_with_transformers_init():
    te = get_preset("tiny").text_encoder
    torch.manual_seed(0)
    model = load_umt5(None, te, torch.bfloat16, "cpu")
    params = dict(model.named_parameters())
    assert {p.dtype for p in params.values()} == {torch.bfloat16}
    assert all(torch.isfinite(p).all() for p in params.values())
    norms = [p for n, p in params.items() if n.endswith("layer_norm.weight")]
    assert len(norms) == 2 * te.num_layers + 1 and all(p.eq(1).all() for p in norms)
    wi = next(p for n, p in params.items() if n.endswith("wi_0.weight"))
    assert abs(wi.float().std().item() * te.dim**0.5 - 1) < 0.2  # N(0, 1/d_model), Mesh TensorFlow's
    wo = next(p for n, p in params.items() if n.endswith("wo.weight"))
    assert abs(wo.float().std().item() * te.ffn_dim**0.5 - 1) < 0.2
    q = next(p for n, p in params.items() if n.endswith("SelfAttention.q.weight"))
    assert abs(q.float().std().item() * (te.dim * te.head_dim) ** 0.5 - 1) < 0.2
    assert abs(model.shared.weight.float().std().item() - 1) < 0.1


def test_random_vae_is_built_on_meta_and_initialized_in_its_dtype(monkeypatch):
    from wanscope.wan import vae as vae_module
    from wanscope.wan.vae_decoder import VAEDecoder

    seen = []

    class Recording(VAEDecoder):  # what the load builds and what its init writes into
        def __init__(self, cfg):
            super().__init__(cfg)
            seen.append({p.device.type for p in self.parameters()})

        def init_weights(self):
            seen.append({(p.device.type, p.dtype) for p in self.parameters()})
            super().init_weights()

    monkeypatch.setattr(vae_module, "VAEDecoder", Recording)
    cfg = get_preset("tiny").vae
    torch.manual_seed(0)
    a = vae_module.load_vae(None, cfg, torch.bfloat16, "cpu")
    assert seen == [{"meta"}, {("cpu", torch.bfloat16)}]  # no fp32 copy: materialized in bf16
    torch.manual_seed(0)
    b = vae_module.load_vae(None, cfg, torch.bfloat16, "cpu")
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert p.dtype == torch.bfloat16 and torch.isfinite(p).all() and torch.equal(p, q), name
        if name.endswith("gamma"):
            assert p.eq(1).all(), name
    torch.manual_seed(0)  # one seed, one VAE: the fp32 one rounds to the bf16 one
    c = vae_module.load_vae(None, cfg, torch.float32, "cpu")
    assert all(torch.equal(p, q.to(torch.bfloat16)) for p, q in zip(a.parameters(), c.parameters(), strict=True))
    conv = a.decoder.conv_in  # PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the bias too
    bound = (conv.in_channels * 27) ** -0.5
    for t in (conv.weight, conv.bias):
        assert t.abs().max().item() <= bound and t.float().std().item() > bound / 3


def test_meta_device_skips_only_meta_initializers():
    """Inside ``meta_device`` a module's initializers leave its meta parameters alone; an
    initializer given a real tensor there still writes it."""
    from torch import nn

    from wanscope.wan.meta import meta_device

    real = torch.zeros(4, 4)
    with meta_device():
        emb, lin = nn.Embedding(10, 4), nn.Linear(4, 4)
        nn.init.ones_(real)
    assert emb.weight.is_meta and lin.weight.is_meta and lin.bias.is_meta
    assert real.eq(1).all()
    assert torch.empty(1).device.type == "cpu"  # the default device is restored


def test_sizing_loading_and_ops_import_no_dynamo():
    """Sizing the 1.3B models on the meta device (the memory planner), building the DiT there
    (a checkpoint's load), building random models and calling our operators import neither
    ``torch._dynamo`` nor sympy (seconds at a process's start); a fresh interpreter, since
    other tests import them."""
    import subprocess
    import sys

    code = """
import sys, torch
from wanscope.wan.config import get_preset
from wanscope.wan.memory_plan import ModelSizes
from wanscope.wan.dit import WanDiT
from wanscope.wan.meta import meta_device
from wanscope.kernels import norm_modulate, rms_norm_rope
from wanscope.wan.text_encoder import load_umt5
from wanscope.wan.vae import load_vae
cfg = get_preset("wan2.1-t2v-1.3b")
ModelSizes.of(cfg, torch.bfloat16, None, torch.float32)
with meta_device():
    WanDiT(cfg.dit)
tiny = get_preset("tiny")
WanDiT.random(tiny.dit, torch.bfloat16, "cpu")
load_umt5(None, tiny.text_encoder, torch.bfloat16, "cpu")
load_vae(None, tiny.vae, torch.float32, "cpu")
x = torch.randn(1, 4, 8)
norm_modulate(x, shift=torch.zeros(1, 8), scale=torch.zeros(1, 8))
rms_norm_rope(x, torch.ones(8), None, 2, 1e-6)
print(sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
