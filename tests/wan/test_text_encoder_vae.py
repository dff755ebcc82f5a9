"""Key mappings of the text encoder and the VAE against the official modules (t5.py, vae2_1.py)
with random weights: the official layout loaded through our loaders gives the official outputs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from wan_helpers import rel_max_err

from wanscope.errors import InputError
from wanscope.wan.config import PRESETS, VAEConfig
from wanscope.wan.text_encoder import ByteTokenizer, TextEncoder, load_umt5
from wanscope.wan.vae import decode, load_vae

TE = PRESETS["tiny"].text_encoder


@pytest.fixture(scope="module")
def official_t5(official, tmp_path_factory):
    torch.manual_seed(0)
    t5 = (
        official("t5")
        .T5Encoder(
            vocab=TE.vocab_size,
            dim=TE.dim,
            dim_attn=TE.num_heads * TE.head_dim,
            dim_ffn=TE.ffn_dim,
            num_heads=TE.num_heads,
            num_layers=TE.num_layers,
            num_buckets=TE.num_buckets,
            shared_pos=False,
            dropout=0.0,
        )
        .eval()
    )
    path = tmp_path_factory.mktemp("t5") / "models_t5_umt5-xxl-enc-bf16.pth"
    torch.save(t5.state_dict(), path)
    return t5, path


def test_official_t5_layout_matches_official_encoder(official_t5):
    t5, path = official_t5
    ids, mask = ByteTokenizer()(["a red fox", "ein roter Fuchs läuft über die Wiese"], 24)
    encoder = TextEncoder(load_umt5(path, TE, torch.float32, "cpu"), ByteTokenizer(), 24)
    ours = encoder.encode(["a red fox", "ein roter Fuchs läuft über die Wiese"])
    with torch.no_grad():
        theirs = t5(ids, mask) * mask[..., None]  # the official cut-then-zero-pad
    err = rel_max_err(ours, theirs)
    assert err <= 1e-5, err
    assert ours.shape == (2, 24, TE.dim)
    assert torch.count_nonzero(ours[0, 10:]) == 0  # 9 bytes + EOS, then zeroed padding
    assert torch.count_nonzero(ours[0, :10].abs().sum(-1)) == 10


def test_diffusers_text_encoder_layout_loads_same_weights(official_t5, tmp_path):
    _, path = official_t5
    model = load_umt5(path, TE, torch.float32, "cpu")
    model.save_pretrained(tmp_path / "text_encoder")
    again = load_umt5(tmp_path / "text_encoder", TE, torch.float32, "cpu")
    ids, mask = ByteTokenizer()(["hello"], 8)
    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=mask).last_hidden_state
        b = again(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(a, b)


def test_t5_wrong_shapes_is_an_input_error(official_t5, tmp_path):
    t5, _ = official_t5
    state = t5.state_dict()
    state["norm.weight"] = torch.ones(TE.dim + 1)
    bad = tmp_path / "bad.pth"
    torch.save(state, bad)
    with pytest.raises(InputError, match=r"bad\.pth: encoder\.final_layer_norm\.weight has shape \(33,\)"):
        load_umt5(bad, TE, torch.float32, "cpu")


def test_official_vae_layout_matches_official_decoder(official, tmp_path):
    cfg = VAEConfig(base_dim=8)
    torch.manual_seed(0)
    ref = (
        official("vae2_1")
        .WanVAE_(
            dim=cfg.base_dim,
            z_dim=cfg.z_dim,
            dim_mult=list(cfg.dim_mult),
            num_res_blocks=cfg.num_res_blocks,
            attn_scales=[],
            temperal_downsample=list(cfg.temporal_downsample),
            dropout=0.0,
        )
        .eval()
    )
    with torch.no_grad():  # non-trivial RMS-norm gains
        for name, p in ref.named_parameters():
            if name.endswith("gamma"):
                p.add_(0.3 * torch.randn_like(p))
    path = tmp_path / "Wan2.1_VAE.pth"
    torch.save(ref.state_dict(), path)
    vae = load_vae(path, cfg, torch.float32, "cpu")
    latents = torch.randn(1, 16, 2, 4, 6, generator=torch.Generator().manual_seed(1))
    mean, std = torch.tensor(cfg.latents_mean), torch.tensor(cfg.latents_std)
    with torch.no_grad():
        theirs = ref.decode(latents, [mean, 1 / std]).clamp(-1, 1)
    ours = decode(vae, latents, cfg)
    assert ours.shape == theirs.shape == (1, 3, 5, 32, 48)
    err = rel_max_err(ours, theirs)
    assert err <= 1e-5, err
