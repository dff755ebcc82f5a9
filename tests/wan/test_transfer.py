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


def test_to_device_off_cuda_is_a_plain_to():
    t = torch.randn(4, 4)
    (same,) = to_device([t], [torch.float32], "cpu")
    assert same is t  # nothing changes, nothing copied
    (half,) = to_device([t], [torch.bfloat16], "cpu")
    _same(half, t.to(torch.bfloat16))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_device_on_cuda_equals_a_pageable_copy(tmp_path):
    """Memory-mapped tensors larger than a staging buffer and small ones between them, some cast
    on the device, exactly as ``.to("cuda", dtype)`` copies them."""
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
    dtypes = [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]
    got = to_device([mapped[n] for n in names], dtypes, "cuda")
    torch.cuda.synchronize()
    for g_, n, d in zip(got, names, dtypes, strict=True):
        assert g_.device.type == "cuda"
        _same(g_, mapped[n].to("cuda", d))
