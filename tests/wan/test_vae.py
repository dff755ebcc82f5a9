"""The VAE decoder (wan/vae_decoder.py) and its loads (wan/vae.py): equal to diffusers'
``AutoencoderKLWan.decode`` given the same weights, the official layout equal to the official
``vae2_1.py`` ``WanVAE_.decode``, folder and file errors naming the file, and no diffusers or
transformers import on the way. Tiny VAEs (base_dim 8), latents of 3 frames, so both temporal
upsamplings and their causal caches run past the first frame."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from wan_helpers import rel_l2, rel_max_err

from wanscope.errors import InputError
from wanscope.wan.config import VAEConfig
from wanscope.wan.vae import channels_last, decode, decoder_key, load_vae, vae_config_from_json

CFG = VAEConfig(base_dim=8)
LATENTS = torch.randn(1, 16, 3, 4, 6, generator=torch.Generator().manual_seed(1))
VIDEO_SHAPE = (1, 3, 9, 32, 48)
# a diffusers vae/config.json of CFG (AutoencoderKLWan's names; theirs has more keys)
CONFIG = {
    "base_dim": 8,
    "z_dim": 16,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "temperal_downsample": [False, True, True],
}


def _un_normalized(latents, dtype):
    mean, std = torch.tensor(CFG.latents_mean), torch.tensor(CFG.latents_std)
    return (latents * std.view(1, -1, 1, 1, 1) + mean.view(1, -1, 1, 1, 1)).to(dtype)


def _perturb_gains(model):
    with torch.no_grad():  # non-trivial RMS-norm gains
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def _write_folder(folder, state, config=CONFIG):
    """A vae/ folder: ``config`` as config.json, ``state`` as diffusion_pytorch_model.safetensors."""
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "diffusion_pytorch_model.safetensors")
    return folder


@pytest.fixture(scope="module")
def diffusers_folder(tmp_path_factory):
    """(diffusers' AutoencoderKLWan, fp32, eval; its save_pretrained folder, encoder included)."""
    pytest.importorskip("diffusers")
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    theirs = _perturb_gains(AutoencoderKLWan(base_dim=CFG.base_dim)).eval()
    folder = tmp_path_factory.mktemp("vae") / "vae"
    theirs.save_pretrained(folder)
    return theirs, folder


def test_folder_decodes_as_diffusers_in_fp32_and_bf16(diffusers_folder):
    from diffusers import AutoencoderKLWan

    theirs, folder = diffusers_folder
    ours = load_vae(folder, CFG, torch.float32, "cpu")
    with torch.no_grad():
        reference = theirs.decode(_un_normalized(LATENTS, torch.float32), return_dict=False)[0]
    video = decode(ours, LATENTS, CFG)
    assert video.shape == reference.shape == VIDEO_SHAPE
    assert rel_max_err(video, reference) <= 1e-6  # the same operations in the same order: equal here
    # bf16: no further from the fp32 decode than diffusers' own bf16 load of the folder is (ours
    # computes each norm and the SiLU after it in fp32 and rounds once)
    ours = load_vae(folder, CFG, torch.bfloat16, "cpu")
    assert {p.dtype for p in ours.parameters()} == {torch.bfloat16}
    theirs_bf16 = AutoencoderKLWan.from_pretrained(str(folder), torch_dtype=torch.bfloat16).eval()
    with torch.no_grad():
        theirs_video = theirs_bf16.decode(_un_normalized(LATENTS, torch.bfloat16), return_dict=False)[0].float()
    ours_err, theirs_err = rel_l2(decode(ours, LATENTS, CFG), reference), rel_l2(theirs_video, reference)
    assert 0 < ours_err <= theirs_err, (ours_err, theirs_err)


def test_official_layout_decodes_as_the_official_decoder(official, tmp_path):
    torch.manual_seed(0)
    ref = (
        official("vae2_1")
        .WanVAE_(
            dim=CFG.base_dim,
            z_dim=CFG.z_dim,
            dim_mult=list(CFG.dim_mult),
            num_res_blocks=CFG.num_res_blocks,
            attn_scales=[],
            temperal_downsample=list(CFG.temporal_downsample),
            dropout=0.0,
        )
        .eval()
    )
    _perturb_gains(ref)
    path = tmp_path / "Wan2.1_VAE.pth"
    torch.save(ref.state_dict(), path)
    vae = load_vae(path, CFG, torch.float32, "cpu")
    # the key table: every official decoder name maps to one of ours, and onto all of them
    decoder_names = [k for k in ref.state_dict() if not k.startswith(("encoder.", "conv1."))]
    assert sorted(decoder_key(k, CFG.num_res_blocks) for k in decoder_names) == sorted(vae.state_dict())
    mean, std = torch.tensor(CFG.latents_mean), torch.tensor(CFG.latents_std)
    with torch.no_grad():
        theirs = ref.decode(LATENTS, [mean, 1 / std]).clamp(-1, 1)
    ours = decode(vae, LATENTS, CFG)
    assert ours.shape == theirs.shape == VIDEO_SHAPE
    err = rel_max_err(ours, theirs)
    assert err <= 1e-5, err  # official un-normalizes as z / (1 / std) + mean
    # the engine's layout on CUDA: the same decode with the 3-D convolutions channels-last
    convs = [m for m in channels_last(vae).modules() if isinstance(m, torch.nn.Conv3d)]
    assert convs and all(m.weight.is_contiguous(memory_format=torch.channels_last_3d) for m in convs)
    err = rel_max_err(decode(vae, LATENTS, CFG), theirs)
    assert err <= 1e-5, err


def test_tiled_and_all_frames_decodes_are_the_frame_by_frame_arithmetic():
    """The placements the memory planner picks between give one video: every frame's up path
    at once, and the up path tile by tile with ``halo`` latent pixels of context (tiles wider
    and taller than the halo, so their inner parts and the frame's edges both occur), equal to
    the frame-by-frame decode but for rounding. In float64, so that rounding (1e-16) and a wrong
    context (1e-5 with a halo one pixel short) lie far apart; in fp32 the CPU's convolutions
    round differently for inputs of other widths (2e-6 here). A VAE of one residual block per
    level (halo 9 = 4 + 2 + 1 + 0.5 + 0.875 + 0.125, rounded up) keeps the frames small."""
    from wanscope.wan.vae_decoder import VAEDecoder

    with torch.device("meta"):
        assert VAEDecoder(VAEConfig()).decoder.halo() == 13  # Wan2.1's: 6 + 3 + 1.5 + 0.75 + 1
    torch.manual_seed(0)
    vae = _perturb_gains(load_vae(None, VAEConfig(base_dim=4, num_res_blocks=1), torch.float64, "cpu"))
    assert vae.decoder.halo() == 9
    z = torch.randn(1, 16, 2, 20, 40, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    whole = vae(z)
    assert whole.shape == (1, 3, 5, 160, 320)
    assert rel_max_err(vae(z, per_frame=False), whole) <= 1e-14
    for tiles in [(1, 2), (2, 3)]:  # (2, 3): the middle column's tiles cut on both sides
        assert rel_max_err(vae(z, tiles=tiles), whole) <= 1e-14, tiles
    vae.decoder.halo = lambda: 8
    assert rel_max_err(vae(z, tiles=(1, 2)), whole) >= 1e-7
    with pytest.raises(ValueError, match="41 tiles across 40 latent pixels"):
        vae(z, tiles=(1, 41))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"z_dim": None}, r"config lacks z_dim"),
        ({"base_dim": "8"}, r"base_dim '8': expected a positive integer"),
        ({"num_res_blocks": 0}, r"num_res_blocks 0: expected a positive integer"),
        ({"dim_mult": []}, r"dim_mult \(\): expected one or more positive integers"),
        ({"temperal_downsample": [True, True]}, r"temporal_downsample \(True, True\): expected 3 booleans"),
        (
            {"temperal_downsample": [True, True, True]},
            r"dim_mult and temperal_downsample give strides \(8, 8, 8\), the latents need \(4, 8, 8\)",
        ),
        ({"z_dim": 48}, r"z_dim 48: the latents have 16 channels"),
        ({"is_residual": True}, r"is_residual True: not a Wan2\.1 VAE"),
        ({"decoder_base_dim": 16}, r"decoder_base_dim 16: not a Wan2\.1 VAE"),
        ({"latents_std": [1.0] * 16}, r"latents_std differs from the preset's"),
    ],
)
def test_folder_config_is_read_and_checked(tmp_path, change, message):
    good = tmp_path / "config.json"
    good.write_text(json.dumps(CONFIG | {"decoder_base_dim": None, "latents_mean": list(CFG.latents_mean)}))
    assert vae_config_from_json(good, CFG) == CFG
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({k: v for k, v in (CONFIG | change).items() if v is not None}))
    with pytest.raises(InputError, match=r"bad\.json: " + message):
        vae_config_from_json(bad, CFG)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("decoder.conv_out.bias"), r"missing keys: decoder\.conv_out\.bias"),
        (lambda s: s.update({"decoder.extra": torch.ones(1)}), r"unexpected keys: decoder\.extra"),
        (
            lambda s: s.update({"post_quant_conv.bias": torch.ones(17)}),
            r"post_quant_conv\.bias has shape \(17,\), the config needs \(16,\)",
        ),
        (
            lambda s: s.update({"decoder.up_blocks.0.resnets.3.norm1.gamma": torch.ones(1)}),
            r"config\.json says 4 levels \(dim_mult\) of 3 residual blocks \(num_res_blocks \+ 1\), "
            r"the weights hold 4 of 4",
        ),
    ],
)
def test_folder_weights_are_checked_against_the_config(tmp_path, edit, message):
    torch.manual_seed(0)
    state = dict(load_vae(None, CFG, torch.float32, "cpu").state_dict())
    state |= {"encoder.conv_in.weight": torch.ones(2), "quant_conv.bias": torch.ones(2)}  # skipped
    good = _write_folder(tmp_path / "good", state)
    assert (
        load_vae(good, CFG, torch.float32, "cpu").state_dict().keys()
        == load_vae(None, CFG, torch.float32, "cpu").state_dict().keys()
    )
    edit(state)
    bad = _write_folder(tmp_path / "bad", state)
    with pytest.raises(InputError, match=r"bad[/\\]diffusion_pytorch_model\.safetensors: " + message):
        load_vae(bad, CFG, torch.float32, "cpu")


def test_a_folder_without_weights_or_a_pth_of_other_keys_is_an_input_error(tmp_path):
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(InputError, match=r"vae: no diffusion_pytorch_model\.safetensors"):
        load_vae(tmp_path / "vae", CFG, torch.float32, "cpu")
    torch.save({"conv2.weight": torch.ones(16, 16, 1, 1, 1)}, tmp_path / "Wan2.1_VAE.pth")
    with pytest.raises(InputError, match=r"Wan2\.1_VAE\.pth: missing keys: "):
        load_vae(tmp_path / "Wan2.1_VAE.pth", CFG, torch.float32, "cpu")


def test_loading_and_decoding_import_neither_diffusers_nor_transformers(tmp_path):
    torch.manual_seed(0)
    _write_folder(tmp_path / "vae", load_vae(None, CFG, torch.float32, "cpu").state_dict())
    code = (
        "import sys, torch\n"
        "from wanscope.wan.config import VAEConfig\n"
        "from wanscope.wan.vae import decode, load_vae\n"
        "cfg = VAEConfig(base_dim=8)\n"
        "latents = torch.randn(1, 16, 2, 2, 2)\n"
        f"for source in (None, {str(tmp_path / 'vae')!r}):\n"
        "    assert decode(load_vae(source, cfg, torch.float32, 'cpu'), latents, cfg).shape == (1, 3, 5, 16, 16)\n"
        "print(sorted(m for m in ('diffusers', 'transformers') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
