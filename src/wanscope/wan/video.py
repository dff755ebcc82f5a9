"""Writing generated frames: an MP4 (imageio-ffmpeg), a PNG contact sheet and a JSON sidecar.

``check_outputs`` refuses, before any work, an output path these cannot be written to. The
files are then written under temporary names in the target folder and renamed into place
together at the end; an error or an interrupt removes the temporaries, so nothing is left
half-written. Without imageio-ffmpeg (the H200 image lacks it) the frames are written as PNGs
in a folder instead, and the returned note says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from wanscope.errors import InputError, check_output

_FRAME = re.compile(r"frame_\d{4}\.png")


def side_paths(out: Path) -> tuple[Path, Path, Path]:
    """The contact sheet, the JSON sidecar and the PNG-frames folder (written without
    imageio-ffmpeg) that go with the MP4 path ``out``."""
    return out.with_suffix(".png"), out.with_suffix(".json"), out.with_name(f"{out.stem}_frames")


def _frames_only(folder: Path) -> bool:
    return all(_FRAME.fullmatch(p.name) and p.is_file() for p in folder.iterdir())


def check_target(path: Path) -> None:
    """Refuse a file path that cannot be written: a directory, a device, FIFO or socket, a missing
    or unwritable folder, or one where no file can be made (tried with a temporary file).

    Raises:
        InputError: naming ``path`` and the problem.
    """
    if path.is_dir():
        raise InputError(path, "is a directory, where an output file goes")
    check_output(path)  # a device, FIFO or socket is refused, never replaced
    if not path.parent.is_dir():
        raise InputError(path, "its folder does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise InputError(path, "its folder is not writable")
    try:  # what os.access cannot tell root: a read-only or virtual file system (/proc, /sys)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
    except OSError as e:
        raise InputError(path, f"its folder cannot hold a new file ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def check_outputs(out: Path) -> None:
    """Refuse an MP4 path whose outputs cannot be written, before any work.

    Raises:
        InputError: ``out`` is no file name (``.``, ``..``) or not UTF-8 text, ends in ``.png`` or ``.json`` (the
            contact sheet or the sidecar would overwrite the video) or in no ``.mp4``, names a
            device, FIFO or socket, its folder does not exist
            or is not writable, ``out`` or a side file is a directory, or the frames folder
            holds files other than frames (it is replaced whole).
    """
    if out.name in ("", ".", ".."):
        raise InputError(out, "is not a file name; give a path such as video.mp4")
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:  # bytes of another encoding: the sidecar's JSON could not hold it
        raise InputError(out, "is not UTF-8 text; give a UTF-8 path") from None
    if out.suffix.lower() in (".png", ".json"):
        raise InputError(out, f"the {out.suffix} written next to the video would overwrite it; give a .mp4 path")
    sheet, sidecar, frames = side_paths(out)
    for path in (out, sheet, sidecar):
        check_target(path)
    if out.suffix.lower() != ".mp4":
        raise InputError(out, "is not a .mp4 path; give a path such as video.mp4")
    if frames.is_dir() and not _frames_only(frames):
        raise InputError(frames, "holds files other than PNG frames; it would be replaced")


def _write_mp4(frames: np.ndarray, path: Path, fps: int, comment: str) -> None:
    """H.264 MP4 of ``frames`` [F, H, W, 3] uint8, with ``comment`` in its metadata.

    Raises:
        ImportError: imageio-ffmpeg is not installed.
    """
    import imageio_ffmpeg

    _, h, w, _ = frames.shape
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (w, h),
        fps=fps,
        codec="libx264",
        pix_fmt_out="yuv420p",
        macro_block_size=1,
        # x264's veryfast preset: faster than its default (medium) at the default CRF's quality,
        # for a slightly larger file (benchmarks/RESULTS.md, "2026-12-02: time to video, the
        # text encoder, VAE and video-write levers")
        output_params=["-preset", "veryfast", "-metadata", f"comment={comment}"],
    )
    try:
        writer.send(None)
        for frame in frames:
            writer.send(np.ascontiguousarray(frame))
    finally:
        writer.close()


def _write_png_frames(frames: np.ndarray, folder: Path) -> None:
    """One PNG per frame, ``frame_0000.png`` ..., in a new ``folder``."""
    folder.mkdir()
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(folder / f"frame_{i:04d}.png")


def _write_contact_sheet(
    frames: np.ndarray, path: Path, columns: int = 4, count: int = 8, comment: str | None = None
) -> None:
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
    meta = PngInfo()
    if comment:
        meta.add_text("Comment", comment)
    # zlib level 1, still lossless: the sheet is the last output to finish, and level 6 (PIL's
    # default) took longer than the MP4's encode beside it (benchmarks/RESULTS.md, "2026-12-06:
    # time to video, the start-up and exit levers")
    Image.fromarray(sheet).save(path, format="PNG", pnginfo=meta, compress_level=1)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_outputs(frames: np.ndarray, out: Path, fps: int, info: dict) -> tuple[list[Path], str | None]:
    """The video (MP4, or PNG frames without imageio-ffmpeg), contact sheet and JSON sidecar.

    Args:
        frames: [F, H, W, 3] uint8.
        out: the MP4 path (``check_outputs`` passed); the sheet is ``out`` with ``.png``, the
            sidecar with ``.json``.
        info: run description; its ``note`` (if any) goes into the MP4's comment metadata;
            where it has ``stage_s`` (stage times), the sidecar's gets ``video_write``: the
            seconds spent writing the video and the contact sheet.

    Returns:
        The paths written and a note when the MP4 fell back to PNG frames (else None).

    Raises:
        OSError: a write failed (its ``filename`` is ``out`` where the system named no file);
            no output is left changed.
    """
    comment = info.get("note") or "wanscope generate"
    sheet, sidecar, frames_folder = side_paths(out)
    staged: list[tuple[Path, Path]] = []  # (temporary, final)

    def stage(final: Path) -> Path:
        tmp = final.with_name(f".{final.stem}.partial{final.suffix}")  # ffmpeg reads the format from it
        _remove(tmp)
        staged.append((tmp, final))
        return tmp

    fallback = None
    started = time.perf_counter()
    try:
        # the contact sheet's PNG compression on a thread, beside the encode (ffmpeg's own
        # process) that the frames are piped to
        with ThreadPoolExecutor(max_workers=1) as pool:
            sheet_written = pool.submit(_write_contact_sheet, frames, stage(sheet), comment=info.get("note"))
            mp4 = stage(out)
            try:
                _write_mp4(frames, mp4, fps, comment)
                video = out
            except ImportError:
                staged.remove((mp4, out))
                video = frames_folder
                _write_png_frames(frames, stage(video))
                fallback = f"imageio-ffmpeg is not installed: wrote PNG frames to {video} instead of {out}"
            sheet_written.result()
        if "stage_s" in info:
            info = {**info, "stage_s": {**info["stage_s"], "video_write": round(time.perf_counter() - started, 4)}}
        stage(sidecar).write_text(
            json.dumps(
                {**info, "video": str(video), "contact_sheet": str(sheet), "fallback": fallback},
                indent=2,
                ensure_ascii=False,
            )
            + "\n"
        )
        for tmp, final in staged:
            if final.is_dir():  # our earlier PNG frames (check_outputs)
                shutil.rmtree(final)
            os.replace(tmp, final)
    except OSError as e:
        if e.filename is None:  # a write that failed part-way (a full disk): name the output
            e.filename = str(out)
        raise
    finally:
        for tmp, _ in staged:
            _remove(tmp)
    return [video, sheet, sidecar], fallback
