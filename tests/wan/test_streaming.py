"""Streamed blocks (wan/streaming.py) run exactly as resident ones: the same outputs bit for
bit, over several forwards, with two slots of device memory; on CUDA, with the copies on a
side stream, the same again (GPU test)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from wanscope.wan.config import PRESETS, TextEncoderConfig
from wanscope.wan.dit import WanDiT
from wanscope.wan.pipeline import Components, Request, generate
from wanscope.wan.streaming import ALIGN, BlockStream, stream_blocks
from wanscope.wan.text_encoder import load_umt5

CFG = PRESETS["tiny"]
DIT = dataclasses.replace(CFG.dit, num_layers=5)  # odd: the slots alternate between blocks
TE = TextEncoderConfig(vocab_size=300, dim=64, ffn_dim=96, num_heads=2, head_dim=32, num_layers=3)


def _dit_inputs(device, batch=1):
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(batch, DIT.in_channels, 3, 8, 8, generator=g)
    context = torch.randn(batch, DIT.text_len, DIT.text_dim, generator=g)
    return latents.to(device), torch.full((batch,), 700.0, device=device), context.to(device)


def _streamed_pair(device, kernels="torch"):
    torch.manual_seed(0)
    ref = WanDiT.random(DIT, torch.float32 if device == "cpu" else torch.bfloat16, device).eval().requires_grad_(False)
    ref.kernels = kernels
    host = copy.deepcopy(ref).to("cpu")
    host.block_stream = stream_blocks(host, host.blocks, device, pin=True)
    return ref, host


def test_streamed_dit_equals_resident_bit_for_bit():
    ref, streamed = _streamed_pair("cpu")
    stream = streamed.block_stream
    inputs = _dit_inputs("cpu")
    with torch.no_grad():
        want = ref(*inputs)
        got = [streamed(*inputs) for _ in range(3)]
    assert all(torch.equal(g, want) for g in got)
    # each forward copies every block once (the next forward's first block included)
    assert stream.loads == 3 * DIT.num_layers + 1
    block_bytes = [sum(p.numel() * p.element_size() for p in b.parameters()) for b in ref.blocks]
    assert stream.slot_bytes >= max(block_bytes)
    assert stream.slot_bytes < max(block_bytes) + ALIGN * len(list(ref.blocks[0].parameters()))
    # every block tensor now points into one of the two slots
    slots = [(s.data_ptr(), s.data_ptr() + s.numel()) for s in stream.slots]
    for block in streamed.blocks:
        for p in block.parameters():
            assert any(lo <= p.data_ptr() < hi for lo, hi in slots)


def test_streamed_umt5_from_a_memory_mapped_checkpoint(tmp_path):
    torch.manual_seed(0)
    ref = load_umt5(None, TE, torch.float32, "cpu")
    path = tmp_path / "models_t5_umt5-xxl-enc-bf16.pth"
    from wanscope.wan.text_encoder import official_t5_key

    torch.save({official_t5_key(k): v for k, v in ref.state_dict().items()}, path)
    model = load_umt5(path, TE, torch.float32, "cpu")
    mapped = model.encoder.block[0].layer[0].SelfAttention.q.weight.untyped_storage()
    model.block_stream = stream_blocks(model, model.encoder.block, "cpu", pin=False, on_host=(model.shared,))
    # read straight from the loaded tensors: no packed host copy
    sources = [src.untyped_storage().data_ptr() for src, _ in model.block_stream.host[0]]
    assert mapped.data_ptr() in sources
    ids = torch.randint(0, TE.vocab_size, (2, 40), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0
    with torch.no_grad():
        assert torch.equal(model(ids, mask), ref(ids, mask))
        assert torch.equal(model(ids, mask), ref(ids, mask))


def test_unpinned_stream_refuses_device_tensors():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device to hold a block outside host memory")
    model = WanDiT.random(DIT, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="in host memory"):
        BlockStream(model.blocks, "cuda", pin=False)


def test_generate_with_every_stage_streamed_equals_resident():
    from wanscope.wan.memory_plan import MemoryPlan

    req = Request(
        prompt="a red fox",
        negative_prompt="blur",
        height=32,
        width=48,
        frames=5,
        steps=2,
        guidance=5.0,
        shift=5.0,
        seed=0,
    )
    parts = Components(config=CFG, device=torch.device("cpu"), dtype=torch.float32)
    resident = generate(parts, req)
    plan = MemoryPlan(1 << 30, "streamed", "streamed", "frame_by_frame", {"text_encoder": 0, "dit": 0, "vae": 0})
    streamed = generate(dataclasses.replace(parts, plan=plan), req)
    assert torch.equal(streamed.latents, resident.latents)
    assert torch.equal(streamed.frames, resident.frames)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: copies on a side stream")
@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_streamed_dit_on_cuda_equals_resident(mode):
    from wanscope.wan.precision import FastConfig, apply_fast_mode

    torch.manual_seed(0)
    ref = WanDiT.random(DIT, torch.bfloat16, "cuda").eval().requires_grad_(False)
    host = copy.deepcopy(ref).to("cpu")
    ref.kernels = host.kernels = "triton"
    if mode == "fast":
        apply_fast_mode(ref, FastConfig())
        apply_fast_mode(host, FastConfig(), quantize_on=torch.device("cuda"))  # as a streamed load does
    host.block_stream = stream_blocks(host, host.blocks, "cuda", pin=True)
    assert host.block_stream.slots[0].is_cuda and host.block_stream.host[0][0][0].is_pinned()
    inputs = _dit_inputs("cuda", batch=2)
    with torch.no_grad():
        want = ref(*inputs)
        for _ in range(3):
            assert torch.equal(host(*inputs), want)
    torch.cuda.synchronize()


def _mapped_rss_bytes(path) -> int:
    """Resident bytes of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = len(fields) == 6 and fields[5] == str(path)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1]) << 10
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_packing_a_memory_mapped_checkpoint_keeps_one_copy_resident(tmp_path):
    """The blocks packed from a checkpoint's memory map (as ``load_dit`` leaves a streamed
    DiT's tensors): the map's pages read for it leave the process block by block (a few
    boundary pages stay, not the file: 16 MB of them stayed before), and the streamed model
    computes what it computed resident, bit for bit (the pages dropped were not written)."""
    from safetensors.torch import load_file, save_file

    cfg = dataclasses.replace(DIT, dim=256, ffn_dim=512)
    torch.manual_seed(0)
    path = tmp_path / "dit.safetensors"
    save_file({k: v.contiguous() for k, v in WanDiT.random(cfg, torch.float32, "cpu").state_dict().items()}, path)
    with torch.device("meta"):
        model = WanDiT(cfg)
    model.load_state_dict(load_file(path), assign=True)  # the tensors are views of the file's map
    model.eval().requires_grad_(False)
    block_bytes = sum(p.numel() * p.element_size() for b in model.blocks for p in b.parameters())
    assert block_bytes > 8 << 20
    latents, t, context = _dit_inputs("cpu")
    with torch.no_grad():
        want = model(latents, t, context)
    assert _mapped_rss_bytes(path) >= block_bytes  # the forward read every block's pages
    model.block_stream = stream_blocks(model, model.blocks, "cpu", pin=True)
    assert model.block_stream.host_bytes >= block_bytes
    rest_bytes = path.stat().st_size - block_bytes  # the header, the other tensors and buffers
    # the rest's pages stay, and a few around each block's ends (its partial pages, and what
    # the kernel maps around a fault: 16 pages on Linux)
    assert _mapped_rss_bytes(path) <= rest_bytes + (128 << 10) * cfg.num_layers
    with torch.no_grad():
        assert torch.equal(model(latents, t, context), want)
