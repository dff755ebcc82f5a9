"""The 14B preset against the published configs: the official code's (Wan2.2's A14B experts
keep Wan2.1 T2V-14B's transformer; PyPI ``wan22``'s ``wan/configs/wan_t2v_A14B.py`` and
``shared_config.py``, read as text: importing them needs easydict) and diffusers'
``WanTransformer3DModel``, whose defaults are the 14B's."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest

from wanscope.wan.config import PRESETS

LARGE = PRESETS["wan2.1-t2v-14b"]


def _assignments(path: Path, name: str) -> dict:
    """``name.key = <literal>`` lines of an official config file."""
    values = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(target := node.targets[0], ast.Attribute):
            if isinstance(target.value, ast.Name) and target.value.id == name:
                try:
                    values[target.attr] = ast.literal_eval(node.value)
                except ValueError:
                    pass  # e.g. torch.bfloat16
    return values


def test_the_14b_preset_is_the_official_config():
    spec = importlib.util.find_spec("wan")
    folder = Path(spec.submodule_search_locations[0]) / "configs" if spec is not None else None
    if folder is None or not (folder / "wan_t2v_A14B.py").is_file():
        pytest.skip("the official code (pip install --no-deps wan22) is not installed")
    official = _assignments(folder / "wan_t2v_A14B.py", "t2v_A14B") | _assignments(
        folder / "shared_config.py", "wan_shared_cfg"
    )
    d = LARGE.dit
    ours = {
        "patch_size": d.patch_size,
        "dim": d.dim,
        "ffn_dim": d.ffn_dim,
        "freq_dim": d.freq_dim,
        "num_heads": d.num_heads,
        "num_layers": d.num_layers,
        "qk_norm": d.qk_norm,
        "cross_attn_norm": d.cross_attn_norm,
        "eps": d.eps,
        "text_len": d.text_len,
        "vae_stride": LARGE.vae.stride,
    }
    assert ours == {key: official[key] for key in ours}
    assert official["window_size"] == (-1, -1)  # full attention, as ours


def test_the_14b_preset_is_diffusers_default_transformer():
    diffusers = pytest.importorskip("diffusers")
    defaults = {k: p.default for k, p in inspect.signature(diffusers.WanTransformer3DModel.__init__).parameters.items()}
    d = LARGE.dit
    assert (d.num_heads, d.dim // d.num_heads, d.ffn_dim, d.num_layers, d.freq_dim, d.text_dim) == (
        defaults["num_attention_heads"],
        defaults["attention_head_dim"],
        defaults["ffn_dim"],
        defaults["num_layers"],
        defaults["freq_dim"],
        defaults["text_dim"],
    )
    assert (d.in_channels, d.out_channels, tuple(defaults["patch_size"])) == (
        defaults["in_channels"],
        defaults["out_channels"],
        d.patch_size,
    )
