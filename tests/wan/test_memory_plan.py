"""The memory planner (wan/memory_plan.py): model sizes as the loaded models hold them, and
the placement it picks for given budgets and model sizes."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from wanscope.errors import UsageError
from wanscope.wan.config import PRESETS
from wanscope.wan.dit import WanDiT
from wanscope.wan.memory_plan import CONTEXT_BYTES, GIB, ModelSizes, plan_memory
from wanscope.wan.precision import FastConfig, apply_fast_mode
from wanscope.wan.text_encoder import load_umt5
from wanscope.wan.vae import load_vae

TINY, SMALL, LARGE = PRESETS["tiny"], PRESETS["wan2.1-t2v-1.3b"], PRESETS["wan2.1-t2v-14b"]


def _bytes(module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


@pytest.mark.parametrize("fast", [None, FastConfig()])
def test_sizes_are_those_of_the_loaded_models(fast):
    """Partitioned as the streams place them, and equal to what the loaders build: the fast
    mode's FP8 copies included (counted from the DiT after ``apply_fast_mode``)."""
    sizes = ModelSizes.of(TINY, torch.float32, fast, torch.float32)
    te = load_umt5(None, TINY.text_encoder, torch.float32, "cpu")
    assert sizes.text_embedding == _bytes(te.shared)
    assert sizes.text_blocks == sum(_bytes(b) for b in te.encoder.block) == sizes.text_block * len(te.encoder.block)
    assert sizes.text_embedding + sizes.text_blocks + sizes.text_rest == _bytes(te)
    dit = WanDiT.random(TINY.dit, torch.float32, "cpu")
    if fast is not None:
        apply_fast_mode(dit, fast)
    # the fused q/k/v and k/v buffers alias the projections' weights: count each storage once
    storages = {}
    for block in dit.blocks:
        for t in (*block.parameters(), *block.buffers()):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    assert sizes.dit_blocks == sum(storages.values())
    assert sizes.dit_rest == _bytes(dit) - sum(_bytes(b) for b in dit.blocks)
    assert sizes.vae == _bytes(load_vae(None, TINY.vae, torch.float32, "cpu"))


def _budget(need: int) -> float:
    """The budget (GiB) that holds a stage of ``need`` bytes: the CUDA context comes on top."""
    return (need + CONTEXT_BYTES) / GIB


def _plan(config, size, budget_gib, fast=None, vae_dtype=torch.float32):
    height, width = size
    budget = None if budget_gib is None else int(budget_gib * GIB)
    return plan_memory(config, height, width, 81, "auto", 5.0, torch.bfloat16, fast, vae_dtype, budget)


def test_no_budget_keeps_everything_resident():
    plan = _plan(SMALL, (480, 832), None)
    assert (plan.text_encoder, plan.dit, plan.vae, plan.vae_tiles) == ("resident", "resident", "all_frames", (1, 1))
    assert plan.as_dict()["budget_bytes"] is None and plan.describe().startswith("memory plan (no budget)")


def test_the_vae_decodes_frame_by_frame_then_in_more_tiles_as_the_budget_shrinks():
    """Each placement is chosen just below the one before's estimate, each estimate smaller;
    the tiles' larger count lies along the frame's longer side (the latent 60x104 at 832x480)."""

    def vae_at(budget_gib, size=(480, 832)):
        plan = _plan(SMALL, size, budget_gib)
        return plan.placement("vae"), plan.estimate_bytes["vae"]

    seen, budget = {}, _budget(max(_plan(SMALL, (480, 832), None).estimate_bytes.values()))
    while True:
        try:
            placement, need = vae_at(budget)
        except UsageError:
            break
        seen[placement] = need
        budget = _budget(need - 1)
    assert list(seen) == ["all_frames", "frame_by_frame", "tiled 1x2", "tiled 2x2", "tiled 2x4"]
    assert vae_at(None, (832, 480))[0] == "all_frames"
    tall = _plan(SMALL, (832, 480), _budget(seen["frame_by_frame"] - 1))
    assert tall.vae == "tiled" and tall.vae_tiles == (2, 1)
    assert tall.as_dict()["vae_tiles"] == list(tall.vae_tiles)
    assert f"vae tiled {tall.vae_tiles[0]}x{tall.vae_tiles[1]} (" in tall.describe()


def test_each_stage_streams_only_when_resident_does_not_fit():
    full = _plan(SMALL, (480, 832), None).estimate_bytes
    big = _budget(max(full.values()))
    assert (_plan(SMALL, (480, 832), big).text_encoder, _plan(SMALL, (480, 832), big).dit) == ("resident", "resident")
    # a budget just under the text encoder's resident need streams it and keeps the DiT resident
    below_text = _budget(full["text_encoder"] - 1)
    plan = _plan(SMALL, (480, 832), max(below_text, _budget(full["vae"]), _budget(full["dit"])))
    if full["text_encoder"] > max(full["vae"], full["dit"]):
        assert (plan.text_encoder, plan.dit) == ("streamed", "resident")
        assert plan.estimate_bytes["text_encoder"] < full["text_encoder"]
    # the 14B DiT (28 GB of bf16 weights) streams in 24 GiB; its text encoder stays resident there
    plan = _plan(LARGE, (720, 1280), 24)
    assert (plan.text_encoder, plan.dit) == ("resident", "streamed")
    assert all(v <= 24 * GIB - CONTEXT_BYTES for v in plan.estimate_bytes.values())


def test_a_budget_too_small_names_the_smallest_that_works():
    with pytest.raises(UsageError) as e:
        _plan(SMALL, (480, 832), 1)
    m = re.search(r"the smallest budget that works is ([\d.]+) GiB \(the (\w[\w ]*) stage\)", str(e.value))
    assert m, str(e.value)
    smallest = float(m.group(1))
    assert smallest > 1
    plan = _plan(SMALL, (480, 832), smallest)  # that budget does work
    assert plan.text_encoder == "streamed"
    with pytest.raises(UsageError):
        _plan(SMALL, (480, 832), smallest - 0.1)


def test_the_fast_mode_plans_its_fp8_copies_and_bf16_vae():
    exact = _plan(SMALL, (480, 832), None).estimate_bytes
    fast = _plan(SMALL, (480, 832), None, FastConfig(), torch.bfloat16).estimate_bytes
    assert fast["dit"] > exact["dit"] and fast["vae"] < exact["vae"]
