"""``wanscope memory SNAPSHOT``: what filled GPU memory, from a CUDA allocator snapshot."""

from __future__ import annotations

from pathlib import Path

import click

from wanscope.clitools import dumps_json, format_option, top_option

HELP = """What filled GPU memory: read a CUDA allocator snapshot (the pickle that
torch.cuda.memory._dump_snapshot writes, or memory_snapshot.pickle of `wanscope profile
--memory-history`), replay its trace per device to the peak of allocated memory, or to the
failed allocation of an out-of-memory error, and list the allocations live there grouped by
the Python stack that made them (its innermost frame outside torch), largest first, with the
allocator's reserved memory and how much of it was unused (fragmentation). For an
out-of-memory error: the request's size, stream and stack, and the device's free memory.

The pickle is read as data only (no class or function it names is imported). Bytes are the
sizes the program requested. JSON fields are documented in docs/json.md ("memory JSON");
how to read them in docs/memory.md."""


def snapshot_doc(path: Path, top: int = 10) -> dict:
    """``analyze_snapshot`` of the snapshot in ``path``, with ``snapshot``: the path.

    Raises:
        InputError: the file cannot be read as a snapshot (``read_snapshot``).
    """
    from wanscope.memory.analysis import analyze_snapshot
    from wanscope.memory.snapshot import read_snapshot

    doc = analyze_snapshot(read_snapshot(path), top)
    return {"snapshot": str(path), **doc}


@click.command(help=HELP)
@click.argument("snapshot", type=click.Path(path_type=Path))
@format_option("table", "json")
@top_option("Stack groups listed per device before the 'other' row.")
def memory(snapshot: Path, fmt: str, top: int):
    doc = snapshot_doc(snapshot, top)
    if fmt == "json":
        click.echo(dumps_json(doc))
        return
    from wanscope.clitools import console
    from wanscope.memory.text import render_memory

    render_memory(doc, console())
