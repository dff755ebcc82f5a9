"""Writing generated frames: an MP4 (imageio-ffmpeg), a PNG contact sheet and a JSON sidecar.

Each file is written under a temporary name in the target folder and renamed into place, so
an interrupted run leaves nothing half-written. Without imageio-ffmpeg (the H200 image lacks
it) the frames are written as PNGs in a folder instead, and the returned note says so.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
from PIL import Image
from PIL.PngImagePlugin import PngInfo


def _replace(tmp: Path, final: Path) -> None:
    if final.is_dir():
        shutil.rmtree(final)
    os.replace(tmp, final)


def write_mp4(frames: np.ndarray, path: Path, fps: int, comment: str) -> None:
    """H.264 MP4 of ``frames`` [F, H, W, 3] uint8, with ``comment`` in its metadata.

    Raises:
        ImportError: imageio-ffmpeg is not installed.
    """
    import imageio_ffmpeg

    tmp = path.with_name(f".{path.stem}.partial.mp4")
    _, h, w, _ = frames.shape
    writer = imageio_ffmpeg.write_frames(
        str(tmp), (w, h), fps=fps, codec="libx264", pix_fmt_out="yuv420p", macro_block_size=1,
        output_params=["-metadata", f"comment={comment}"],
    )
    try:
        writer.send(None)
        for frame in frames:
            writer.send(np.ascontiguousarray(frame))
    finally:
        writer.close()
    _replace(tmp, path)


def write_png_frames(frames: np.ndarray, folder: Path) -> None:
    """One PNG per frame, ``frame_0000.png`` ..., in ``folder`` (replaced whole)."""
    tmp = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(tmp / f"frame_{i:04d}.png")
    _replace(tmp, folder)


def write_contact_sheet(frames: np.ndarray, path: Path, columns: int = 4, count: int = 8,
                        comment: str | None = None) -> None:
    """Up to ``count`` evenly spaced frames tiled ``columns`` wide, as one PNG; ``comment``
    (e.g. the random-weights note) goes into its ``Comment`` text chunk."""
    idx = np.unique(np.linspace(0, len(frames) - 1, min(count, len(frames))).round().astype(int))
    rows = -(-len(idx) // columns)
    cols = min(columns, len(idx))
    _, h, w, _ = frames.shape
    sheet = np.zeros((rows * h, cols * w, 3), dtype=np.uint8)
    for k, i in enumerate(idx):
        r, c = divmod(k, cols)
        sheet[r * h : (r + 1) * h, c * w : (c + 1) * w] = frames[i]
    tmp = path.with_name(f".{path.stem}.partial.png")
    meta = PngInfo()
    if comment:
        meta.add_text("Comment", comment)
    Image.fromarray(sheet).save(tmp, pnginfo=meta)
    _replace(tmp, path)


def write_json(obj: dict, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    _replace(tmp, path)


def write_outputs(frames: np.ndarray, out: Path, fps: int, info: dict) -> tuple[list[Path], str | None]:
    """The video (MP4, or PNG frames without imageio-ffmpeg), contact sheet and JSON sidecar.

    Args:
        frames: [F, H, W, 3] uint8.
        out: the MP4 path; the sheet is ``out`` with ``.png``, the sidecar with ``.json``.
        info: run description; its ``note`` (if any) goes into the MP4's comment metadata.

    Returns:
        The paths written and a note when the MP4 fell back to PNG frames (else None).
    """
    comment = info.get("note") or "wanscope generate"
    fallback = None
    try:
        write_mp4(frames, out, fps, comment)
        video = out
    except ImportError:
        video = out.with_name(f"{out.stem}_frames")
        write_png_frames(frames, video)
        fallback = f"imageio-ffmpeg is not installed: wrote PNG frames to {video} instead of {out}"
    sheet, sidecar = out.with_suffix(".png"), out.with_suffix(".json")
    write_contact_sheet(frames, sheet, comment=info.get("note"))
    write_json({**info, "video": str(video), "contact_sheet": str(sheet), "fallback": fallback}, sidecar)
    return [video, sheet, sidecar], fallback
