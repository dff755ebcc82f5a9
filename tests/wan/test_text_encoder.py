"""Key mappings of the text encoder against the official module (t5.py) with random weights: the
official layout loaded through our loader gives the official outputs (the VAE's: test_vae.py)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from wan_helpers import rel_l2, rel_max_err

from wanscope.errors import InputError
from wanscope.wan.config import PRESETS, TextEncoderConfig
from wanscope.wan.text_encoder import (
    ByteTokenizer,
    CheckpointTokenizer,
    TextEncoder,
    config_from_json,
    load_umt5,
    official_t5_key,
    transformers_config,
)

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
    # the inverse naming (for writing the official layout) gives the official module's names
    assert {official_t5_key(k) for k in encoder.model.state_dict()} == set(t5.state_dict())


def _transformers_umt5(model):
    """transformers' UMT5EncoderModel holding ``model``'s tensors (the parameter names match)."""
    from transformers import UMT5Config, UMT5EncoderModel

    theirs = UMT5EncoderModel(UMT5Config(**transformers_config(model.cfg))).eval()
    state = model.state_dict()
    state["encoder.embed_tokens.weight"] = state["shared.weight"]  # transformers' tied alias
    theirs.load_state_dict(state, strict=True)
    return theirs


def test_encoder_matches_transformers_umt5_and_loads_its_folder(official_t5, tmp_path):
    _, path = official_t5
    model = load_umt5(path, TE, torch.float32, "cpu")
    theirs = _transformers_umt5(model)
    ids, mask = ByteTokenizer()(["hello", "a longer prompt with more tokens in it"], 48)
    with torch.no_grad():
        reference = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
        ours = model(ids, mask)
    assert rel_max_err(ours, reference) <= 1e-5
    theirs.save_pretrained(tmp_path / "text_encoder")  # safetensors, the shared embedding once
    again = load_umt5(tmp_path / "text_encoder", TE, torch.float32, "cpu")
    assert again.cfg == TE
    with torch.no_grad():
        assert torch.equal(again(ids, mask), ours)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"feed_forward_proj": "relu"}, r"feed_forward_proj 'relu'"),
        ({"d_model": "32"}, r"dim '32': expected a positive integer"),
        ({"num_heads": -4}, r"num_heads -4: expected a positive integer"),
        ({"layer_norm_epsilon": -1.0}, r"eps -1.0: expected a positive finite number"),
        ({"relative_attention_num_buckets": 2}, r"num_buckets 2 and max_distance 128"),
        ({"relative_attention_max_distance": 8}, r"num_buckets 32 and max_distance 8"),
        ({"d_model": None}, r"config lacks d_model"),
    ],
)
def test_folder_config_is_read_and_checked(tmp_path, change, message):
    good = tmp_path / "config.json"
    good.write_text(json.dumps(transformers_config(TE)))
    assert config_from_json(good) == TE
    bad = tmp_path / "bad.json"
    config = {k: v for k, v in (transformers_config(TE) | change).items() if v is not None}
    bad.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"bad\.json: " + message):
        config_from_json(bad)


def test_folder_whose_config_and_weights_disagree_on_the_block_count(official_t5, tmp_path):
    _, path = official_t5
    _transformers_umt5(load_umt5(path, TE, torch.float32, "cpu")).save_pretrained(tmp_path / "te")
    config = json.loads((tmp_path / "te" / "config.json").read_text())
    (tmp_path / "te" / "config.json").write_text(json.dumps(config | {"num_layers": 10**9}))
    with pytest.raises(InputError, match=r"te: config\.json says num_layers 1000000000, the weights hold 2 blocks"):
        load_umt5(tmp_path / "te", TE, torch.float32, "cpu")


def test_embedding_saved_under_both_names_must_agree(official_t5, tmp_path):
    from safetensors.torch import save_file

    _, path = official_t5
    model = load_umt5(path, TE, torch.float32, "cpu")
    folder = tmp_path / "te"
    _transformers_umt5(model).save_pretrained(folder)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state | {"encoder.embed_tokens.weight": state["shared.weight"].clone()}, folder / "model.safetensors")
    with torch.no_grad():
        assert torch.equal(load_umt5(folder, TE, torch.float32, "cpu").shared.weight, state["shared.weight"])
    save_file(
        state | {"encoder.embed_tokens.weight": torch.zeros_like(state["shared.weight"])}, folder / "model.safetensors"
    )
    with pytest.raises(InputError, match=r"te: shared\.weight and encoder\.embed_tokens\.weight differ"):
        load_umt5(folder, TE, torch.float32, "cpu")


def test_a_prompt_of_padding_alone_stays_finite_in_bf16():
    torch.manual_seed(0)
    model = load_umt5(None, TE, torch.bfloat16, "cpu")
    ids = torch.zeros(2, 12, dtype=torch.long)
    mask = torch.zeros_like(ids)
    mask[1, :3] = 1
    with torch.no_grad():
        out = model(ids, mask)
    assert torch.isfinite(out).all()


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """A word-level tokenizer saved by transformers (tokenizer.json and its configs)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2} | {w: i + 3 for i, w in enumerate("a red fox in the snow runs".split())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    folder = tmp_path_factory.mktemp("tokenizer")
    PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(folder)
    return folder


def test_tokenizer_matches_transformers_padding_and_truncation(tokenizer_folder):
    from transformers import AutoTokenizer

    texts = ["a red fox", "a red fox in the snow runs in the red snow", "zebra", ""]
    ids, mask = CheckpointTokenizer(tokenizer_folder)(texts, 6)
    ref = AutoTokenizer.from_pretrained(str(tokenizer_folder))(
        texts, padding="max_length", truncation=True, max_length=6, add_special_tokens=True, return_tensors="pt"
    )
    assert torch.equal(ids, ref.input_ids) and torch.equal(mask, ref.attention_mask)
    assert ids[0].tolist() == [3, 4, 5, 1, 0, 0]  # words, </s>, padding
    assert ids[1].tolist()[-1] == 1 and mask[1].tolist() == [1] * 6  # cut to 6 with </s> kept
    assert ids[2].tolist()[:2] == [2, 1]  # <unk>


def test_tokenizer_folder_errors_name_the_file(tmp_path):
    bad = tmp_path / "tok"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{not json")
    with pytest.raises(InputError, match=r"tokenizer\.json: not a tokenizer"):
        CheckpointTokenizer(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"empty: no tokenizer\.json, and no loadable tokenizer"):
        CheckpointTokenizer(empty)


def test_t5_wrong_shapes_is_an_input_error(official_t5, tmp_path):
    t5, _ = official_t5
    state = t5.state_dict()
    state["norm.weight"] = torch.ones(TE.dim + 1)
    bad = tmp_path / "bad.pth"
    torch.save(state, bad)
    with pytest.raises(InputError, match=r"bad\.pth: encoder\.final_layer_norm\.weight has shape \(33,\)"):
        load_umt5(bad, TE, torch.float32, "cpu")


def test_bf16_encoder_is_as_close_to_fp32_as_transformers_bf16():
    """Our bf16 numerics (fp32 norm statistics and softmax, fused tanh-GELU) against the same
    bf16-rounded weights run in fp32: no further off than transformers' UMT5 in bf16."""
    cfg = TextEncoderConfig(vocab_size=1000, dim=256, ffn_dim=640, num_heads=4, head_dim=64, num_layers=4)
    torch.manual_seed(0)
    ours = load_umt5(None, cfg, torch.bfloat16, "cpu")
    truth_model = load_umt5(None, cfg, torch.float32, "cpu")
    truth_model.load_state_dict({k: v.float() for k, v in ours.state_dict().items()})
    theirs = _transformers_umt5(truth_model).bfloat16()
    ids = torch.randint(0, cfg.vocab_size, (2, 200), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 60:] = 0
    with torch.no_grad():
        truth = truth_model(ids, mask)
        ours_err = rel_l2(ours(ids, mask).float(), truth)
        theirs_err = rel_l2(theirs(input_ids=ids, attention_mask=mask).last_hidden_state.float(), truth)
    assert 0 < ours_err <= 1.1 * theirs_err, (ours_err, theirs_err)
