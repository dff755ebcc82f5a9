"""``wan/warm_start.py``: which runs start the side threads, and that they end."""

from __future__ import annotations

import sys

import pytest

from wanscope.wan import warm_start


@pytest.mark.parametrize(
    ("device", "index"), [(None, None), ("cuda", None), ("cuda:3", 3), ("cpu", -1), ("cuda:x", -1), ("mps", -1)]
)
def test_the_device_index_of_each_device_name(device, index):
    assert warm_start.device_index(device) == index


def test_nothing_starts_for_the_cpu_a_parallel_run_or_a_torchrun_rank(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert warm_start.begin("cpu", None) is None
    assert warm_start.begin("cuda", "cfg") is None
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert warm_start.begin(None, None) is None


def test_a_cuda_run_starts_one_daemon_thread_that_ends(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    thread = warm_start.begin("cuda:0", None)  # on a machine without CUDA it finds none and ends
    assert thread is not None and thread.daemon and thread.name == "wanscope_cuda_context"
    thread.join(timeout=120)
    assert not thread.is_alive()


def test_triton_is_hashed_on_a_thread_only_once_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    assert warm_start.hash_triton() is None
    triton = pytest.importorskip("triton")
    monkeypatch.setitem(sys.modules, "triton", triton)
    thread = warm_start.hash_triton()
    assert thread is not None and thread.daemon
    thread.join(timeout=120)
    from triton.runtime.cache import triton_key

    assert triton_key.cache_info().currsize == 1  # computed there, cached for the kernels
