"""``wan/warm_start.py``: which runs start the side threads, and the read-ahead's files and order."""

from __future__ import annotations

import os

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
    assert thread is not None and thread.daemon and thread.name == "wanscope-warm-start"
    thread.join(timeout=120)
    assert not thread.is_alive()


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this system")
def test_read_ahead_advises_each_weight_file_in_the_stages_order(tmp_path, monkeypatch):
    encoder = tmp_path / "models_t5.pth"
    dit = tmp_path / "transformer"
    dit.mkdir()
    for path in (encoder, dit / "b.safetensors", dit / "a.safetensors", dit / "config.json", tmp_path / "vae.pth"):
        path.write_bytes(b"x" * 10)
    advised = []
    real = os.posix_fadvise

    def spy(fd, offset, length, advice):
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    missing = tmp_path / "gone.pth"  # skipped: the load reports it
    thread = warm_start.read_ahead([encoder, dit, missing, tmp_path / "vae.pth"])
    thread.join(timeout=60)
    names = [os.path.relpath(p, tmp_path) for p, _ in advised]
    assert names == ["models_t5.pth", "transformer/a.safetensors", "transformer/b.safetensors", "vae.pth"]
    assert {a for _, a in advised} == {os.POSIX_FADV_WILLNEED}
