"""Pinned, double-buffered host-to-device copies of checkpoint tensors (wan/transfer.py): every
byte arrives, in order, whatever the packing into the staging buffers."""

import pytest
import torch

from wanscope.wan.transfer import staged_copy, to_device


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(7, 33, generator=g)
    return [
        torch.randn(5, 3, generator=g).to(torch.bfloat16),  # 30 bytes: packed beside the next ones
        torch.tensor(3.5),  # 0-d
        torch.empty(0, 4),  # no bytes
        wide.t(),  # not contiguous
        torch.randint(0, 2, (19,), generator=g).bool(),
        torch.randn(301, generator=g, dtype=torch.float64),  # spans several buffers
        torch.arange(-50, 50, dtype=torch.int8),
    ]


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape and got.is_contiguous()
    assert torch.equal(got.cpu(), want.cpu())


@pytest.mark.parametrize("stage_bytes", [1, 29, 100, 4096])
def test_staged_copy_moves_every_byte_for_any_buffer_size(stage_bytes):
    tensors = _tensors()
    dtypes = [torch.float32, torch.float32, torch.float32, torch.float16, torch.bool, torch.float64, torch.int8]
    got = staged_copy(tensors, dtypes, torch.device("cpu"), pin_memory=False, stage_bytes=stage_bytes)
    for g, t, d in zip(got, tensors, dtypes, strict=True):
        _same(g, t.to(d))


def test_staged_copy_refuses_an_empty_buffer_and_to_device_unpaired_dtypes():
    with pytest.raises(ValueError, match="stage_bytes"):
        staged_copy([torch.ones(2)], [torch.float32], torch.device("cpu"), pin_memory=False, stage_bytes=0)
    with pytest.raises(ValueError, match="1 tensors but 2 dtypes"):
        to_device([torch.ones(2)], [torch.float32, torch.float32], "cpu")


def test_to_device_off_cuda_is_a_plain_to():
    t = torch.randn(4, 4)
    (same,) = to_device([t], [torch.float32], "cpu")
    assert same is t  # nothing changes, nothing copied
    (half,) = to_device([t], [torch.bfloat16], "cpu")
    _same(half, t.to(torch.bfloat16))


def _checkpoint(tmp_path):
    """Memory-mapped tensors larger than a staging buffer and small ones between them."""
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(1)
    big = 40 << 20  # elements: 80 MB in bf16, more than one 64 MB buffer
    save_file(
        {
            "a": torch.randn(big, generator=g).to(torch.bfloat16),
            "b": torch.randn(3, 5, generator=g),
            "c": torch.randn(big // 2, 3, generator=g).to(torch.bfloat16),
            "d": torch.randn(1, generator=g),
        },
        tmp_path / "w.safetensors",
    )
    mapped = load_file(tmp_path / "w.safetensors")
    names = sorted(mapped)
    return [mapped[n] for n in names], [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_device_on_cuda_equals_a_pageable_copy_behind_a_busy_stream(tmp_path):
    """Exactly as ``.to("cuda", dtype)`` copies them, some cast on the device, while the stream
    is held back by a long kernel first: a buffer refilled before its transfer ran would show."""
    tensors, dtypes = _checkpoint(tmp_path)
    torch.cuda._sleep(1 << 30)  # ~0.5 s of spinning ahead of the copies on the current stream
    got = to_device(tensors, dtypes, "cuda")
    torch.cuda.synchronize()
    for g_, t, d in zip(got, tensors, dtypes, strict=True):
        assert g_.device.type == "cuda"
        _same(g_, t.to("cuda", d))
    assert to_device([], [], "cuda") == []


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_to_device_on_another_device_than_the_current_one(tmp_path):
    tensors, dtypes = _checkpoint(tmp_path)
    with torch.cuda.device(0):
        with torch.cuda.device(1):
            torch.cuda._sleep(1 << 30)  # the target device's stream busy
        got = to_device(tensors, dtypes, "cuda:1")
        torch.cuda.synchronize(1)
    for g_, t, d in zip(got, tensors, dtypes, strict=True):
        assert g_.device == torch.device("cuda:1")
        _same(g_, t.to("cuda:1", d))
