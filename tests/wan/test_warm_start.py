"""``wan/warm_start.py``: which runs start the side threads, and that they end."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from wanscope.wan import warm_start


def test_nothing_starts_for_the_cpu_a_parallel_run_or_a_torchrun_rank(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert warm_start.begin("cpu", None) is None and warm_start.begin(" cpu ", None) is None
    assert warm_start.begin("cuda", "cfg") is None
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert warm_start.begin(None, None) is None


@pytest.mark.parametrize("device", [None, "cuda:0", "cuda:99", "gpu"])
def test_a_cuda_run_starts_one_daemon_thread_that_ends(monkeypatch, device):
    """The thread makes CUDA's context where the name is one ``generate`` accepts and there is
    a device; a name it will refuse, or a machine without CUDA, leaves CUDA as it was."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    thread = warm_start.begin(device, None)
    assert thread is not None and thread.daemon and thread.name == "wanscope_cuda_context"
    warm_start.settle()
    assert not thread.is_alive()
    if not torch.cuda.is_available():
        assert not torch.cuda.is_initialized()
    elif device in (None, "cuda:0"):
        assert torch.cuda.is_initialized()


def test_triton_is_hashed_on_a_thread_only_once_imported(monkeypatch):
    triton = pytest.importorskip("triton")
    from triton.runtime.cache import triton_key

    monkeypatch.delitem(sys.modules, "triton")
    assert warm_start.hash_triton() is None
    monkeypatch.setitem(sys.modules, "triton", triton)
    triton_key.cache_clear()
    thread = warm_start.hash_triton()
    assert thread is not None and thread.daemon
    thread.join(timeout=120)
    assert triton_key.cache_info().currsize == 1  # computed there, cached for the kernels
