"""``wanscope memory SNAPSHOT`` in this process (``run_main``): the table and the JSON of a
snapshot with an out-of-memory error, and every input it refuses in one line with exit code 2:
no file, a folder, not a pickle, a pickle of something else, a malformed snapshot, and hostile
pickles that would run code when loaded by ``pickle.load`` (refused, nothing run)."""

from __future__ import annotations

import json
import os
import pickle
from collections import OrderedDict

import pytest
from cli_context import run_main
from synthetic_snapshots import GIB, MIB, Allocator, frames, snapshot, write

GROW = frames(
    "/venv/lib/python3.11/site-packages/torch/utils/_device.py:104:__torch_function__",
    "/home/u/oom.py:8:grow",
    "/home/u/oom.py:15:main",
    "/home/u/oom.py:18:<module>",
)


@pytest.fixture
def oom_snapshot(tmp_path):
    a = Allocator()
    a.segment(0, 2 * GIB)
    a.alloc(0, 2 * GIB, GROW)
    a.segment(4 * GIB, 4 * GIB)
    a.alloc(4 * GIB, 4 * GIB, GROW)
    a.oom(8 * GIB, GIB, GROW)
    return write(tmp_path / "memory_snapshot.pickle", snapshot(a))


def one_line_error(r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wanscope: error: "), r.stderr
    assert r.stdout == ""
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_the_table_shows_the_failed_allocation_its_stack_and_what_held_the_memory(oom_snapshot, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = run_main("memory", oom_snapshot)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"memory snapshot {oom_snapshot}" in out
    assert (
        "device 0: out of memory - the failed allocation asked for 8.00 GiB on stream 0, with 1.00 GiB free on the device"
        in out
    )
    assert "  at /home/u/oom.py:8 in grow\n     /home/u/oom.py:15 in main\n     /home/u/oom.py:18 in <module>\n" in out
    assert (
        "at the failed allocation (event 4 of 5, 40.0 us after the first): allocated 6.00 GiB in 2 allocations "
        "· reserved 6.00 GiB · reserved but unused 0 B (0.00%)" in out
    )
    row = next(line for line in out.splitlines() if "6.00 GiB" in line and "│" in line)
    assert [c.strip() for c in row.strip("│").split("│")] == ["6.00 GiB", "100.00%", "2", "/home/u/oom.py:8 in grow"]
    assert "note: device 0: the failed allocation asked for 8.00 GiB, more than the device's free 1.00 GiB" in out


def test_json(oom_snapshot):
    r = run_main("memory", oom_snapshot, "--format", "json", "--top", "1")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["snapshot"] == str(oom_snapshot) and doc["schema_version"] == 1
    (d,) = doc["devices"]
    assert d["oom"]["size_bytes"] == 8 * GIB and d["oom"]["stack"] == GROW
    assert len(d["groups"]) == 1 and d["groups"][0]["allocations"] == 2


def test_the_json_section_of_the_docs_names_every_field(oom_snapshot):
    """docs/json.md's "memory JSON" documents each field the command writes (by its path)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "json.md").read_text()
    section = text.split("## memory JSON", 1)[1].split("\n## ", 1)[0]
    doc = json.loads(run_main("memory", oom_snapshot, "--format", "json").stdout)
    d = doc["devices"][0]
    paths = [*doc, *(f"devices[].{k}" for k in d)]
    paths += [f"devices[].{k}.{sub}" for k in ("at", "oom", "trace", "dump", "other") for sub in d[k]]
    paths += [f"devices[].groups[].{k}" for k in d["groups"][0]]
    missing = [p for p in paths if f"`{p}`" not in section]
    assert missing == []


def test_no_file_a_folder_and_a_device(tmp_path):
    one_line_error(run_main("memory", tmp_path / "missing.pickle"), "missing.pickle: no such file")
    one_line_error(run_main("memory", tmp_path), f"{tmp_path}: is a directory, not a snapshot file")
    one_line_error(run_main("memory", "/dev/null"), "/dev/null: is a device, not a snapshot file")


@pytest.mark.parametrize(
    "content",
    [b"", b"hello, not a pickle\n", b'{"segments": [], "device_traces": []}', pickle.dumps({"a": 1})[:-3]],
    ids=["empty", "text", "json", "cut"],
)
def test_not_a_pickle(tmp_path, content):
    path = tmp_path / "x.pickle"
    path.write_bytes(content)
    one_line_error(run_main("memory", path), f"{path}: not a pickle (a memory snapshot is the pickle")


@pytest.mark.parametrize(
    "obj, problem",
    [
        ([1, 2, 3], "a pickle, but not a memory snapshot (a dict with 'segments' and 'device_traces' lists)"),
        ({"segments": {}, "device_traces": []}, "a pickle, but not a memory snapshot"),
        ({"segments": [{"address": 0, "total_size": 1, "blocks": []}], "device_traces": [[{"action": "alloc"}]]},
         "device_traces[0][0].addr: not an integer (alloc event)"),
        ({"segments": [{"address": 0, "total_size": 1, "blocks": [{"size": 1, "state": "busy"}]}], "device_traces": []},
         "segments[0].blocks[0].state: 'busy', not one of active_allocated"),
        ({"segments": [], "device_traces": [[{"action": "alloc", "addr": 0, "size": 1, "frames": [{"line": 1}]}]]},
         "device_traces[0][0].frames: not a list of frames"),
        ({"segments": [], "device_traces": [[{"action": "oom", "size": True, "device_free": 0}]]},
         "device_traces[0][0].size: not an integer (oom event)"),
    ],
    ids=["list", "segments-dict", "no-addr", "bad-state", "bad-frame", "bool-size"],
)  # fmt: skip
def test_a_pickle_that_is_not_a_snapshot(tmp_path, obj, problem):
    path = write(tmp_path / "x.pickle", obj)
    one_line_error(run_main("memory", path), f"{path}: {problem}")


class Payload:
    """What a hostile pickle does: ``pickle.load`` calls ``os.system`` to build it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    hostile = {"segments": [], "device_traces": [[]], "x": Payload(marker)}
    path = tmp_path / "memory_snapshot.pickle"
    path.write_bytes(pickle.dumps(hostile))
    line = one_line_error(run_main("memory", path), f"{path}: refused: it names ")
    assert "system" in line and "nothing was run" in line
    assert not marker.exists()
    # the same file through plain pickle.load would have run it: the payload is real
    pickle.loads(path.read_bytes())
    assert marker.exists()


def test_any_class_is_refused_even_a_harmless_one(tmp_path):
    path = write(tmp_path / "x.pickle", {"segments": [], "device_traces": [], "od": OrderedDict(a=1)})
    one_line_error(run_main("memory", path), "refused: it names collections.OrderedDict")


def test_torchs_tuples_and_extra_keys_are_data(tmp_path):
    a = Allocator()
    a.segment(0, 4 * MIB)
    a.alloc(0, MIB, GROW)
    snap = snapshot(a)
    snap["device_traces"][0][1]["pool_id"] = (0, 0)
    snap["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "", "roundup_power2_divisions": {"1": 0}}
    r = run_main("memory", write(tmp_path / "s.pickle", snap), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["devices"][0]["allocated_bytes"] == MIB


def test_top_must_be_positive(oom_snapshot):
    r = run_main("memory", oom_snapshot, "--top", "0")
    assert r.returncode == 2 and "--top" in r.stderr and len(r.stderr.strip().splitlines()) == 1
