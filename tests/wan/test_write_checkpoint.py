"""benchmarks/write_checkpoint.py: the random-valued checkpoint folders the load and time-to-video
benchmarks read, in both layouts, load through the engine's own loaders."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import Components
from wanscope.wan.weights import detect_layout

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import write_checkpoint

TINY = get_preset("tiny")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    layouts = ["diffusers"]
    if _has_wan22() and importlib.util.find_spec("einops"):
        layouts.append("official")
    for layout in layouts:
        write_checkpoint.write(TINY, layout, root / layout, torch.device("cpu"))
    return {layout: root / layout for layout in layouts}


def _has_wan22() -> bool:
    spec = importlib.util.find_spec("wan")
    return spec is not None and (Path(spec.submodule_search_locations[0]) / "modules" / "vae2_1.py").is_file()


def _parts(folder):
    return Components(config=TINY, device=torch.device("cpu"), dtype=torch.float32, checkpoint=folder)


def test_both_layouts_load_and_hold_the_same_dit_and_text_encoder(folders):
    if "official" not in folders:
        pytest.skip("the official layout's VAE needs the official code (pip install --no-deps wan22 einops)")
    for layout, folder in folders.items():
        assert detect_layout(folder).kind == layout
        assert "RANDOM WEIGHTS" in (folder / "WANSCOPE_RANDOM_WEIGHTS.txt").read_text()
    a, b = _parts(folders["official"]), _parts(folders["diffusers"])
    dit_a, dit_b = a.dit().state_dict(), b.dit().state_dict()
    assert dit_a.keys() == dit_b.keys() and all(torch.equal(dit_a[k], dit_b[k]) for k in dit_a)
    enc_a, enc_b = a.text_encoder(), b.text_encoder()
    states = enc_a.encode(["a cat walks on the grass"])
    assert torch.equal(states, enc_b.encode(["a cat walks on the grass"]))
    ids, mask = enc_a.tokenizer(["a cat walks on the grass"], 16)
    n = int(mask.sum())
    assert 2 <= n < 16 and ids[0, n - 1] == 1 and ids[0, n:].eq(0).all()  # words, </s>, <pad>
    assert states.shape == (1, TINY.dit.text_len, TINY.text_encoder.dim) and states[0, :n].abs().sum() > 0


def test_vae_loads_from_each_layout_and_decodes(folders):
    latents = torch.randn(1, 16, 2, 4, 4, generator=torch.Generator().manual_seed(0))
    from wanscope.wan.vae import decode

    for folder in folders.values():
        video = decode(_parts(folder).vae(), latents, TINY.vae)
        assert video.shape == (1, 3, 5, 32, 32) and torch.isfinite(video).all() and video.std() > 0


def test_an_existing_folder_is_refused_and_a_failure_leaves_nothing(tmp_path, monkeypatch):
    taken = tmp_path / "taken"
    taken.mkdir()
    monkeypatch.setattr(
        sys, "argv", ["write_checkpoint.py", "--layout", "diffusers", "--preset", "tiny", "--out", str(taken)]
    )
    with pytest.raises(SystemExit, match="exists"):
        write_checkpoint.main()

    def fail(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(write_checkpoint, "save_sharded", fail)
    out = tmp_path / "new"
    monkeypatch.setattr(
        sys,
        "argv",
        ["write_checkpoint.py", "--layout", "diffusers", "--preset", "tiny", "--device", "cpu", "--out", str(out)],
    )
    with pytest.raises(RuntimeError, match="disk full"):
        write_checkpoint.main()
    assert not out.exists()


def test_shards_with_an_index_when_over_the_limit(tmp_path, monkeypatch):
    from wanscope.wan.weights import read_safetensors, safetensors_files

    monkeypatch.setattr(write_checkpoint, "SHARD_BYTES", 1000)
    tensors = {f"t{i}": torch.full((100,), float(i)) for i in range(3)}  # 400 bytes each
    write_checkpoint.save_sharded(tensors, tmp_path, "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    back = read_safetensors(safetensors_files(tmp_path, "model"))
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)


def test_a_tokenizer_larger_than_the_embedding_is_an_input_error(folders, tmp_path):
    import shutil

    from tokenizers import Tokenizer, models

    from wanscope.errors import InputError

    folder = tmp_path / "ckpt"
    shutil.copytree(folders["diffusers"], folder)
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2} | {f"w{i}": i + 3 for i in range(TINY.text_encoder.vocab_size)}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(folder / "tokenizer" / "tokenizer.json"))
    with pytest.raises(InputError, match=r"tokenizer: the tokenizer has 387 tokens, the text encoder's embedding 384"):
        _parts(folder).text_encoder()


def test_text_width_comes_from_the_checkpoints_encoder_config(folders, tmp_path):
    """What the ranks of --parallel receive the text states as, known without loading UMT5."""
    import json
    import shutil

    assert _parts(folders["diffusers"]).text_width == TINY.text_encoder.dim
    folder = tmp_path / "ckpt"
    shutil.copytree(folders["diffusers"], folder)
    config = folder / "text_encoder" / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"d_model": 48}))
    assert _parts(folder).text_width == 48
    if "official" in folders:
        assert _parts(folders["official"]).text_width == TINY.text_encoder.dim  # the .pth: the preset's
