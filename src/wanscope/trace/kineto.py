"""Ingest PyTorch profiler (Kineto) Chrome-JSON traces into the canonical schema.

A large trace is never held as one Python object tree. torch.profiler writes every event
as a block of lines at fixed indentation (``  {`` ... ``  },``, inner lines indented by
four or more spaces); re-written traces often hold one event per line. JSON never holds a
raw newline inside a string, so "newline + the events' indentation + ``{``" always starts
an event: the events region is cut there, without parsing, into files of whole events
wrapped as JSON arrays (``_Layout``, ``_ChunkWriter``), and DuckDB's JSON reader parses
several such files per statement on parallel threads (``_STAGE_SELECT``, appended to the
``_stage`` table) while the next ones are cut; every ``STAGED_EVENTS`` events the staged
rows move to the canonical tables (``_insert_stage``). Any other layout (minified, other
producers), a region that does not end with "newline + indentation + ``]``", a run DuckDB
cannot parse (or runs out of memory on) or a comma missing at a cut goes through ijson's
streaming parser into the same files, with only the fields staged of each event (a huge
``args`` entry is never built).

Times: ``start_ns = round(ts * 1000)`` and ``dur_ns = round(dur * 1000)`` computed on the
decimal text (parsed to DECIMAL(35, 3), which rounds half away from zero as round()
does), ``end_ns = start_ns + dur_ns`` (docs/design.md, "Canonical trace schema").
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import queue
import re
import tempfile
import threading
import zlib
from pathlib import Path

import duckdb
import ijson
import orjson

from wanscope.errors import InputError
from wanscope.trace.link import PARTIAL_OVERLAPS_KEY, clip_overruns

# bytes of events per file DuckDB parses; with STAGE_FILES and STAGED_EVENTS, what one staging
# statement holds at once, the peak of ingest's memory (benchmarks/RESULTS.md, "2026-12-04:
# analyze against issue 23's parent, narrow staging and compressed cpu_ops")
CHUNK_BYTES = 10 << 20
# Key added to an event whose bytes were not valid UTF-8 (replaced by U+FFFD before DuckDB
# parses it), so that one with such bytes in its name is excluded (issue 2: counted by kind,
# excluded from window and busy).
UNDECODABLE_KEY = "wanscope_undecodable"
# meta key of a source whose rank was taken by an earlier input: the rank it claimed.
CLAIMED_RANK_KEY = "wanscope_claimed_rank"
STAGE_FILES = 8  # files per staging statement, parsed on parallel threads (an even count per core)
EVENTS_KEY = b'"traceEvents"'
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"[ \t\r\n]*:')
_BLANKS_RE = re.compile(rb"[ \t\r\n]*")
HEADER_LIMIT = 256 << 20  # bytes read looking for traceEvents
# Bounds on what one event, one JSON token or the part after the events may take: far
# above any real trace (an event is at most kilobytes), and what keeps a gzip bomb or a
# file of one endless string from exhausting memory.
EVENT_LIMIT = 64 << 20
MAX_DEPTH = 128  # JSON nesting (an event's args nest about 5 deep)

# Kineto category (lower case) -> what it becomes. Older Kineto wrote capitalized names.
CATEGORIES = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "driver": "driver",
    "cpu_op": "op",
    "operator": "op",
    "python_function": "python",
    "user_annotation": "annotation",
    "cuda_sync": "sync",
}
# Categories that are known and carry nothing the schema keeps.
IGNORED_CATEGORIES = {
    "ac2g",
    "fwdbwd",
    "overhead",
    "trace",
    "gpu_user_annotation",
    "cuda_profiler_range",
    "python_function_call",
    "kineto",
    "gpu_hw_counter",
}

# Device events of accelerators other than CUDA and ROCm GPUs (Kineto's activity type names,
# lower case) -> the accelerator. Left out of every table, counted (other_accelerator) and
# named by category in meta (OTHER_ACCELERATOR_KEY), so that a note can say what was left out.
OTHER_ACCELERATORS = {
    "mtia_ccp_events": "MTIA",
    "mtia_insight": "MTIA",
    "mtia_counters": "MTIA",
    "mlu_memcpy": "MLU",
    "mlu_memset": "MLU",
    "mlu_notifier": "MLU",
    "gcu_memcpy": "GCU",
    "gcu_memset": "GCU",
}
OTHER_ACCELERATOR_KEY = "wanscope_other_accelerator"

# Fields read from each event. Times are parsed from the number's text straight into
# DECIMAL (never through float64); other numbers are read as text so that integers beyond
# 64 bits are detected instead of failing the whole read. A value that does not convert
# becomes NULL (ignore_errors) and its record is counted.
_ARGS = {
    "External id": "VARCHAR",
    "correlation": "VARCHAR",
    "device": "VARCHAR",
    "stream": "VARCHAR",
    "grid": "VARCHAR",
    "block": "VARCHAR",
    "registers per thread": "VARCHAR",
    "shared memory": "VARCHAR",
    "bytes": "VARCHAR",
    "Input Dims": "VARCHAR",
    "Input type": "VARCHAR",
    "Concrete Inputs": "VARCHAR",
    "name": "VARCHAR",
    # PyTorch's memory events ([memory] instant events of profile_memory=True); their "Bytes"
    # cannot be read beside the memcpys' "bytes" (DuckDB's struct fields ignore case): the
    # analysis takes it from the change in "Total Allocated"
    "Total Allocated": "VARCHAR",
    "Total Reserved": "VARCHAR",
    "Addr": "VARCHAR",
    "Device Type": "VARCHAR",
    "Device Id": "VARCHAR",
}
_COLUMNS = {
    "ph": "VARCHAR",
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    # Parsing the number's text into 3 decimals rounds half away from zero, as round() does,
    # so ts * 1000 is then exactly round(ts * 1000); 35 digits keep that product within
    # DECIMAL(38) (larger values fail the parse and count as no_timing).
    "ts": "DECIMAL(35, 3)",
    "dur": "DECIMAL(35, 3)",
    "id": "VARCHAR",
    "args": "STRUCT(" + ", ".join(f'"{k}" {v}' for k, v in _ARGS.items()) + ")",
    UNDECODABLE_KEY: "BOOLEAN",
}
_COLUMNS_SQL = "{" + ", ".join(f"'{k}': '{v}'" for k, v in _COLUMNS.items()) + "}"  # read_json's columns

_BIG = "9223372036854775807"  # largest BIGINT: ns values beyond it are integer_overflow
_KNOWN = ", ".join(f"'{c}'" for c in CATEGORIES)
_LOWER = ", ".join(f"'{c}'" for c in [*CATEGORIES, "ac2g"])  # lower() only for the rest
_IGNORED = ", ".join(f"'{c}'" for c in IGNORED_CATEGORIES)
_OTHER = ", ".join(f"'{c}'" for c in OTHER_ACCELERATORS)
_GPU = "('kernel', 'gpu_memcpy', 'memcpy', 'gpu_memset', 'memset')"
_API = "('cuda_runtime', 'runtime', 'cuda_driver', 'driver')"
_HOST = "('cpu_op', 'operator', 'python_function', 'user_annotation')"
_WARNINGS = (
    "no_timing",
    "zero_duration",
    "end_before_start",
    "malformed_event",
    "unknown_category",
    "other_accelerator",
    "integer_overflow",
)
assert len(_WARNINGS) <= 8, "_stage.warnings is a UTINYINT bitmask: one bit per warning"
_WARNING_BIT = {w: 1 << i for i, w in enumerate(_WARNINGS)}  # the warning's bit in _stage.warnings

# One pass over the parsed events computes, per record, where it goes (``dest``: kernel,
# memop, api, host, memory, sync, flow, or NULL when excluded), its typed columns and the warnings
# it raises; the inserts into the canonical tables then only filter on ``dest``.
# A GPU record's device is args.device, else pid; its stream args.stream, else tid; NULL
# where neither is an integer that fits the column. Appended to the table _stage.
#
# _stage holds STAGED_EVENTS rows and one statement's more, uncompressed, so the columns one
# destination alone needs share a column with another's (~200 bytes a row against ~300 with a
# column each):
#   kind      flow: its end ('s', 'f'); memop: memcpy or memset; api: driver or runtime;
#             host: op, python or annotation
#   name      the record's name; a flow's id; a sync's args.name, else its name; an other
#             accelerator's category (for its warning)
#   device    GPU records and syncs: as above; memory: c10's device index (-1 the CPU)
#   arg1-3    host ops (cpu_op, operator): Input Dims, Input type, Concrete Inputs (JSON text);
#             kernel: grid, block (JSON text)
#   n1-n3     kernel: registers per thread, shared memory; memop: bytes;
#             memory: Total Allocated, Total Reserved, Addr
#   warnings  bit i set when the record raises _WARNINGS[i]
_DEST = "ENUM('kernel', 'memop', 'api', 'host', 'memory', 'sync', 'flow')"
_KIND = "ENUM('s', 'f', 'memcpy', 'memset', 'driver', 'runtime', 'op', 'python', 'annotation')"
_STAGE_SELECT = f"""
WITH raw AS (
  SELECT ph, CASE WHEN cat IN ({_LOWER}) THEN cat ELSE lower(cat) END AS cat, name, pid, tid, id,
         (ts * 1000)::HUGEINT AS s, (dur * 1000)::HUGEINT AS d, args, {UNDECODABLE_KEY}
  FROM read_json(?, format = 'array', columns = {_COLUMNS_SQL}, ignore_errors = true)
), typed AS (
  SELECT *,
         cat IN ({_KNOWN}) AS known,
         cat IN {_GPU} AS gpu,
         cat IN ('cpu_op', 'operator') AS op,
         CASE WHEN cat IN {_GPU} OR cat = 'cuda_sync'
              THEN coalesce(try_cast(args.device AS INTEGER), try_cast(pid AS INTEGER)) END AS device,
         CASE WHEN cat IN {_GPU} OR cat = 'cuda_sync'
              THEN coalesce(try_cast(args.stream AS BIGINT), try_cast(tid AS BIGINT)) END AS stream,
         try_cast(args.correlation AS BIGINT) AS corr, try_cast(args."External id" AS BIGINT) AS ext,
         coalesce(ph = 'X' AND name IS NOT NULL AND s > 0 AND s <= {_BIG} AND d <= {_BIG}
                  AND s + d <= {_BIG}, false) AS valid,
         coalesce(ph = 'i' AND name = '[memory]', false) AS mem_event,
         coalesce(ph = 'i' AND name = '[memory]' AND s > 0 AND s <= {_BIG}
                  AND try_cast(args."Total Allocated" AS BIGINT) >= 0
                  AND coalesce(try_cast(args."Total Reserved" AS BIGINT), 0) >= 0
                  AND (try_cast(args."Device Type" AS INTEGER) = 0 OR try_cast(args."Device Id" AS INTEGER) >= 0),
                  false) AS mem
  FROM raw
), flagged AS (
  SELECT *,
         known AND ((args."External id" IS NOT NULL AND ext IS NULL)
                    OR (args.correlation IS NOT NULL AND corr IS NULL)
                    OR (s IS NOT NULL AND (s > {_BIG} OR d > {_BIG} OR s + d > {_BIG}))) AS overflow,
         coalesce({UNDECODABLE_KEY} AND contains(name, '\ufffd'), false) AS undecodable_name
  FROM typed
), warned AS (
  -- warnings (per record, counted; the record excluded, except undecodable bytes outside its
  -- name and a GPU record of zero duration, which is kept as it is)
  SELECT *,
         ph = 'X' AND known AND (s IS NULL OR s <= 0 OR d IS NULL) AS no_timing,
         gpu AND valid AND d = 0 AND device IS NOT NULL AND stream IS NOT NULL AND NOT overflow
             AND NOT undecodable_name AS zero_duration,
         ph = 'X' AND known AND s > 0 AND d < 0 AS end_before_start,
         ph IS NULL OR (ph = 'X' AND known AND name IS NULL) OR (mem_event AND NOT mem)
            OR (ph = 'X' AND gpu AND name IS NOT NULL AND s > 0 AND d >= 0 AND s + d <= {_BIG}
                AND (device IS NULL OR stream IS NULL)) AS malformed_event,
         ph = 'X' AND cat IS NOT NULL AND NOT known AND cat NOT IN ({_IGNORED}) AND cat NOT IN ({_OTHER})
            AS unknown_category,
         ph = 'X' AND cat IN ({_OTHER}) AS other_accelerator,
         overflow AS integer_overflow
  FROM flagged
)
SELECT
  (CASE WHEN cat = 'ac2g' AND ph IN ('s', 'f') THEN 'flow'
        WHEN mem THEN 'memory'
        WHEN NOT valid OR overflow OR undecodable_name THEN NULL
        WHEN gpu THEN CASE WHEN d >= 0 AND device IS NOT NULL AND stream IS NOT NULL
                           THEN CASE WHEN cat = 'kernel' THEN 'kernel' ELSE 'memop' END END
        WHEN d < 0 THEN NULL
        WHEN cat IN {_API} THEN 'api'
        WHEN cat IN {_HOST} THEN 'host'
        WHEN cat = 'cuda_sync' THEN 'sync' END)::{_DEST} AS dest,
  (CASE WHEN cat = 'ac2g' AND ph IN ('s', 'f') THEN ph
        WHEN cat IN ('gpu_memcpy', 'memcpy') THEN 'memcpy'
        WHEN cat IN ('gpu_memset', 'memset') THEN 'memset'
        WHEN cat IN ('cuda_driver', 'driver') THEN 'driver'
        WHEN cat IN ('cuda_runtime', 'runtime') THEN 'runtime'
        WHEN op THEN 'op'
        WHEN cat = 'python_function' THEN 'python'
        WHEN cat = 'user_annotation' THEN 'annotation' END)::{_KIND} AS kind,
  CASE WHEN cat = 'ac2g' THEN id
       WHEN cat = 'cuda_sync' THEN coalesce(args.name, name)
       WHEN other_accelerator THEN cat ELSE name END AS name,
  CASE WHEN valid OR mem THEN s::BIGINT END AS start_ns, CASE WHEN valid THEN d::BIGINT END AS dur_ns,
  CASE WHEN NOT gpu THEN try_cast(pid AS BIGINT) END AS pid,
  CASE WHEN NOT gpu THEN try_cast(tid AS BIGINT) END AS tid,
  -- c10's DeviceType: 0 is the CPU (its Device Id is -1)
  CASE WHEN mem THEN CASE WHEN try_cast(args."Device Type" AS INTEGER) = 0 THEN -1
                          ELSE try_cast(args."Device Id" AS INTEGER) END
       ELSE device END AS device,
  stream, corr, ext,
  CASE WHEN op THEN args."Input Dims" WHEN cat = 'kernel' THEN args.grid END AS arg1,
  CASE WHEN op THEN args."Input type" WHEN cat = 'kernel' THEN args.block END AS arg2,
  CASE WHEN op THEN args."Concrete Inputs" END AS arg3,
  CASE WHEN mem THEN try_cast(args."Total Allocated" AS BIGINT)
       WHEN cat = 'kernel' THEN try_cast(args."registers per thread" AS INTEGER)
       WHEN gpu THEN try_cast(args.bytes AS BIGINT) END AS n1,
  CASE WHEN mem THEN try_cast(args."Total Reserved" AS BIGINT)
       WHEN cat = 'kernel' THEN try_cast(args."shared memory" AS BIGINT) END AS n2,
  CASE WHEN mem THEN try_cast(args."Addr" AS BIGINT) END AS n3,
  ({" | ".join(f"(coalesce({w}, false)::UTINYINT * {b})" for w, b in _WARNING_BIT.items())}) AS warnings
FROM warned
"""


def _open(path: Path, gz: bool):
    return gzip.open(path, "rb") if gz else open(path, "rb")


def _read_header(f, path: Path) -> tuple[bytes, bytes]:
    """Read until the events array opens. Returns (header bytes, bytes after ``[``).

    Linear in what it reads, and at most 256 MB of it (a gzip bomb of whitespace ends there).

    Raises:
        InputError: empty, not a JSON object, no ``traceEvents`` key in the first 256 MB,
            or ``traceEvents`` is not a list.
    """
    buf = bytearray()
    started = False  # a non-blank byte was read
    searched = 0  # where the next search for the key starts
    key_at = None  # where the key starts, once found
    pos = 0  # after the key's colon and the blanks read so far
    while True:
        if key_at is None:
            m = _EVENTS_KEY_RE.search(buf, searched)
            if m:
                key_at, pos = m.start(), m.end()
            else:  # the key may straddle the next read
                searched = max(0, len(buf) - len(EVENTS_KEY) - 64)
        if key_at is not None:
            pos = _BLANKS_RE.match(buf, pos).end()
            if pos < len(buf):
                if buf[pos] != ord("["):
                    raise InputError(path, "traceEvents is not a list: not a PyTorch profiler trace")
                return bytes(buf[:key_at]), bytes(buf[pos + 1 :])
        more = f.read(1 << 16)
        if not more:
            if not started:
                raise InputError(path, "empty file")
            if key_at is not None:
                raise _Malformed("truncated: ends inside traceEvents", len(buf))
            raise InputError(path, "no traceEvents: not a PyTorch profiler trace")
        if not started and more.strip():
            started = True
            if not more.lstrip().startswith(b"{"):
                raise _Malformed("not JSON: expected an object", len(buf) + len(more) - len(more.lstrip()))
        buf += more
        if len(buf) > HEADER_LIMIT:
            raise InputError(path, "no traceEvents in the first 256 MB: not a PyTorch profiler trace")


def _read_bounded(f, limit: int, path: Path, what: str) -> bytes:
    """The rest of ``f``, refusing more than ``limit`` bytes."""
    data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(path, f"{what} is larger than {limit >> 20} MB")
    return data


def _loads(text: bytes):
    """Parse JSON ``text`` (the top-level keys besides traceEvents, small), any JSON value
    allowed, exactly: Python's parser, which keeps integers beyond 64 bits (orjson turns
    them into floats) and takes numbers beyond a double's range (as infinity).

    Raises:
        ValueError: ``text`` is not JSON (``NaN`` and ``Infinity`` included, as the
            streaming parser refuses them).
        _TooDeep: nested deeper than Python's parser recurses.
    """
    try:
        return json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise _TooDeep from None


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")


def _meta_text(value) -> str:
    """A top-level key's value as the ``meta`` table's text: a string as it is, any other
    JSON value as JSON (integers beyond 64 bits too)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, default=float)


def _header_dict(header: bytes, trailer: bytes | None, path: Path, trailer_at: int = 0) -> dict:
    """Top-level keys other than traceEvents (small: device properties, distributedInfo);
    ``trailer`` (the bytes after the events' ``]``, None where the streaming parser read
    them) starts at byte ``trailer_at`` of the file.

    Raises:
        _Malformed: the trailer is not the end of a JSON object.
    """
    text = header.rstrip().rstrip(b",").strip()
    if not text.startswith(b"{"):
        raise _Malformed("not JSON: expected an object", len(header) - len(header.lstrip()))
    meta = {}
    try:
        meta.update(_loads(text + b"}") if text != b"{" else {})
    except (ValueError, _TooDeep):
        pass  # keys before traceEvents malformed: keep going, the events are what matter
    # After the events (native layout only; None otherwise): "}" or more keys, "," +
    # '"key": value ... }'. Anything else is a file cut short or not JSON (the streaming
    # parser refuses it too).
    tail = b"}" if trailer is None else trailer.strip()
    if tail != b"}":
        at = trailer_at + len(trailer) - len(trailer.lstrip())  # the file's offset of tail
        keys = tail[1:].lstrip() if tail.startswith(b",") else b""
        if keys or tail.startswith(b"}"):  # the keys, or what follows the object's end
            at += len(tail) - len(keys or tail[1:].lstrip())
        try:
            if not keys.startswith(b'"'):
                raise ValueError
            meta.update(_loads(b"{" + keys))
        except ValueError as e:
            if isinstance(e, json.JSONDecodeError):
                at += max(e.pos - 1, 0)  # in keys, after the "{" put before them
            elif isinstance(e, UnicodeDecodeError):
                at += max(e.start - 1, 0)
            raise _Malformed("truncated or malformed JSON after traceEvents", at) from None
        except _TooDeep:
            raise InputError(path, "JSON after traceEvents nested too deeply: not a PyTorch profiler trace") from None
    return meta


_NEWLINES_TO_SPACES = bytes.maketrans(b"\n\r", b"  ")


def _yajl_offset(message: str, buf: bytes) -> int | None:
    """The offset in ``buf`` (what yajl last parsed) of the error yajl describes in
    ``message``: its second line quotes ``buf`` around the offset (30 bytes either side,
    newlines as spaces, decoded as UTF-8), right-aligned so that the offset falls under
    the ``^`` of the third line (at column 40). The first offset that gives the same quote
    (yajl stops at the first error); None when none does."""
    lines = message.split("\n")
    if len(lines) < 3 or not lines[2].endswith("^"):
        return None
    quote = lines[1]
    text = buf.translate(_NEWLINES_TO_SPACES)
    n = len(text)

    def quoted(at: int) -> bool:
        pad = 10 if at >= 30 else 40 - at
        return " " * pad + text[max(at - 30, 0) : at + 30].decode("utf-8", "ignore") == quote

    if not quote.isascii():  # a cut character: try every offset (error messages only)
        candidates = range(n + 1)
    elif len(quote) < 70:  # the quote reaches the end of the buffer: 30 bytes or fewer after it
        candidates = [n - (len(quote) - 40)]
    else:
        right = quote[40:].encode()
        candidates, at = [], text.find(right)
        while at >= 0:
            candidates.append(at)
            at = text.find(right, at + 1)
    return next((at for at in candidates if 0 <= at <= n and quoted(at)), None)


class _Malformed(Exception):
    """Not valid JSON at ``offset`` (bytes from the file's start, uncompressed): ``problem``
    (and yajl's ``detail``) becomes the one-line error, with the line and column."""

    def __init__(self, problem: str, offset: int, detail: str = ""):
        super().__init__(problem)
        self.problem, self.offset, self.detail = problem, offset, detail


def _where(path: Path, gz: bool, offset: int) -> str:
    """``line L, column C (byte N)`` of ``offset`` in the (uncompressed) file, as Python's
    json says it: line and column counted from 1, the byte from 0; reads the file again,
    up to ``offset`` (error messages only)."""
    lines, line_start, read = 1, 0, 0
    try:
        with _open(path, gz) as f:
            while read < offset:
                block = f.read(min(1 << 20, offset - read))
                if not block:
                    break
                n = block.count(b"\n")
                if n:
                    lines += n
                    line_start = read + block.rindex(b"\n") + 1
                read += len(block)
    except (OSError, EOFError, zlib.error):
        pass  # the offset alone, where the file no longer reads that far
    compressed = " of the uncompressed JSON" if gz else ""
    return f"line {lines}, column {offset - line_start + 1} (byte {offset}{compressed})"


class _ChunkWriter:
    """Writes runs of whole events as JSON-array files (``[`` + events + ``]``) for DuckDB.

    DuckDB's ``format = 'array'`` reader parses the events as they are laid out (one block
    of lines each, one line each, or anything else), so the file's bytes are copied, never
    rewritten. Invalid UTF-8 is replaced by U+FFFD (DuckDB refuses it) and the events that
    held some are counted.
    """

    def __init__(self, tmpdir: str, marker: bytes = b"\n{"):
        self.tmpdir, self.marker = tmpdir, marker
        self.undecodable = 0
        self.written = 0

    def write(self, buf: bytes | bytearray, n: int, last: bool = False) -> str | None:
        """Write ``buf[:n]`` (whole events, each led by ``marker``, and the comma before the
        next event unless ``last``) to a new file; return its path, None if it is blank.
        (Bytes after ``n`` count only in a fast check that all of ``buf`` is ASCII.)

        Raises:
            _OtherLayout: that comma is missing or doubled, or there is one after the last
                event: not valid JSON there, which DuckDB would not see (the streaming
                parser decides).
        """
        view = memoryview(buf)[:n]
        if not buf.isascii():  # rare: the fast check covers almost every trace
            body = bytes(view)
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                events = body.split(self.marker)
                fixed = [e.decode("utf-8", "replace").encode() for e in events]
                # events[0] is what precedes the first event start (blanks): never flagged
                flag = b' "%s": true,' % UNDECODABLE_KEY.encode()
                fixed[1:] = [flag + y if x != y else y for x, y in zip(events[1:], fixed[1:])]
                self.undecodable += sum(x != y for x, y in zip(events, fixed))
                body = self.marker.join(fixed)
            view = memoryview(body)
        n = len(view)
        while n and view[n - 1] in b" \t\r\n":
            n -= 1
        if not n:
            return None
        if (view[n - 1] == ord(",")) == last:
            raise _OtherLayout
        n -= not last
        while n and view[n - 1] in b" \t\r\n":
            n -= 1
        if not n or view[n - 1] == ord(","):
            raise _OtherLayout
        path = os.path.join(self.tmpdir, f"chunk-{self.written}.json")
        self.written += 1
        with open(path, "wb") as out:
            out.write(b"[")
            out.write(view[:n])
            out.write(b"\n]")
        return path


class _Layout:
    """Where whole events begin in the events region, read from its first event.

    Every event starts on a new line at one fixed indentation: torch.profiler's own layout
    writes ``  {`` at two spaces (inner lines at four or more), re-written traces one event
    per line. JSON never holds a raw newline inside a string and deeper lines are indented
    further, so "newline + that indentation + ``{``" is always an event boundary: the region
    is cut there into runs of whole events, without parsing it. The region ends at
    "newline + that indentation + ``]``".
    """

    def __init__(self, indent: bytes):
        self.marker = b"\n" + indent + b"{"
        self.end = b"\n" + indent + b"]"
        self.trailer_at = 0  # the file's offset of what follows the region (chunks sets it)

    @classmethod
    def detect(cls, rest: bytes) -> _Layout | None:
        m = re.match(rb"[ \t]*\n([ \t]*)\{([^\n]*)\n", rest)
        if not m:
            return None
        indent, first_line = m.group(1), m.group(2)
        if indent == b"  " and first_line.strip() == b"":
            return cls(indent)  # torch.profiler's own layout
        if first_line.rstrip().endswith((b"}", b"},")):
            return cls(indent)  # one event per line
        return None

    def chunks(self, f, rest: bytes, path: Path, write):
        """Cut the events region into files of whole events with ``write``; yield each
        path; return the bytes after the region's ``]``. The file is read into one buffer,
        reused for every run (a new one per read cost a page fault per 4 KB and, with the
        concatenation, twice the memory)."""
        tail = rest if rest.startswith(b"\n") else rest[rest.index(b"\n") :]
        buf = bytearray(len(tail) + CHUNK_BYTES)
        buf[: len(tail)] = tail
        filled = len(tail)  # buf[filled:] is free (or stale) room
        eof = False
        while True:
            if not eof:
                if len(buf) - filled < CHUNK_BYTES:  # an event longer than the room left
                    buf += bytes(CHUNK_BYTES)
                with memoryview(buf) as view:
                    n = f.readinto(view[filled : filled + CHUNK_BYTES])
                eof = not n
                filled += n
            # The region's end follows its last event: look for it after the last event start.
            cut = buf.rfind(self.marker, 0, filled)
            end = buf.find(self.end, max(cut, 0), filled)
            if end >= 0:
                trailer = bytes(buf[end + len(self.end) : filled])
                self.trailer_at = f.tell() - len(trailer)
                if not eof:
                    trailer += _read_bounded(f, EVENT_LIMIT - len(trailer), path, "the part after traceEvents")
                chunk = write(buf, end, last=True)
                if chunk:
                    yield chunk
                return trailer
            if eof:
                # No "\n<indent>]" after the last event: the region ends some other way
                # ("}]}" on the last event's line, "]" at another indentation, a minified
                # tail) or the file is cut short. One that ends as a JSON object does is
                # read again by the streaming parser, which decides.
                if buf[:filled].rstrip().endswith(b"}"):
                    raise _OtherLayout
                raise _Malformed("truncated: ends inside traceEvents", f.tell())
            if cut <= 0:
                if filled > EVENT_LIMIT:
                    raise _OtherLayout  # one huge event, or a tail in another layout: the streaming parser decides
                continue
            chunk = write(buf, cut)
            tail = bytes(buf[cut:filled])
            buf[: len(tail)] = tail
            filled = len(tail)
            if chunk:
                yield chunk


class _OtherLayout(Exception):
    pass


def _staged_in_batches(paths, stage, batch: int) -> bytes:
    """Run the ``paths`` generator (reading and cutting the file) in a background thread
    while ``stage`` (DuckDB parsing, which releases the GIL) works on earlier files, up to
    ``batch`` files per call so that DuckDB parses them on parallel threads. Returns the
    generator's return value; re-raises its exceptions here."""
    q: queue.Queue = queue.Queue(maxsize=batch)
    result: dict = {}
    halt = threading.Event()  # the consumer failed or was interrupted: read no further

    def produce():
        try:
            while not halt.is_set():
                try:
                    q.put(("chunk", next(paths)))
                except StopIteration as stop:
                    result["value"] = stop.value
                    break
            q.put(("done", None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, re-raised there
            q.put(("error", e))

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    pending: list[str] = []
    try:
        while True:
            kind, item = q.get()
            if kind == "chunk":
                pending.append(item)
                if len(pending) >= batch:
                    stage(pending)
                    pending = []
                continue
            if kind == "error":
                raise item
            if pending:
                stage(pending)
            return result.get("value") or b""
    finally:
        halt.set()
        while thread.is_alive():  # unblock the producer if the consumer failed
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)


class _GuardedReader:
    """The file as ijson reads it: invalid UTF-8 replaced by U+FFFD (as the native layout
    does; ijson's parser stops at it), and at most ``EVENT_LIMIT`` bytes read without the
    parser producing an event (one endless string or blank run, e.g. a gzip bomb, would
    otherwise be buffered whole) or for one trace event, or after the events (``_checked``
    says where they end)."""

    def __init__(self, f):
        self.f = f
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.since_event = 0
        self.since_item = 0
        self.item = "an event larger than"  # what since_item measures, for the message
        self.replaced = 0
        self.undecodable = 0  # trace events that held replaced bytes (_checked counts them)
        self.read_bytes = 0  # bytes read from f so far
        self.last_at = 0  # ... before the last read, whose bytes as handed to ijson are:
        self.last = b""

    def read(self, n: int = -1) -> bytes:
        if n > 0 and self.since_event > (1 << 16):
            # Inside a long token: yajl re-scans its partial token on every read, so
            # feed it megabytes at a time (time quadratic in the token over the read size).
            n = 1 << 20
        data = self.f.read(n)
        self.last_at = self.read_bytes
        self.read_bytes += len(data)
        self.last = data
        self.since_event += len(data)
        self.since_item += len(data)
        if self.since_event > EVENT_LIMIT:
            raise _TooLarge("a JSON string or blank run larger than")
        if self.since_item > EVENT_LIMIT:
            raise _TooLarge(self.item)
        try:
            data.decode("utf-8")  # fast path; a multi-byte character cut by the read fails too
        except UnicodeDecodeError:
            pass
        else:
            if not self.decoder.getstate()[0]:
                return data
        text = self.decoder.decode(data, final=not data)
        self.replaced += text.count("\ufffd") - data.count("\ufffd".encode())
        self.last = text.encode("utf-8")
        return self.last

    def error_offset(self, message: str) -> int:
        """Where in the file (bytes from its start, uncompressed) the parser stopped with
        ``message``: found from the context yajl quotes around that point in the last
        read; the start of that read where the context does not pin it down (bytes were
        replaced, or the quote is not ASCII). The end of the file after the last read."""
        if not self.last:
            return self.read_bytes
        at = _yajl_offset(message, self.last)
        return self.last_at + (0 if at is None else min(at, self.read_bytes - self.last_at))


class _TooLarge(Exception):
    pass


class _TooDeep(Exception):
    pass


_EVENT_KEYS = frozenset(_COLUMNS)
_ARG_KEYS = frozenset(_ARGS)


def _checked(events, reader: _GuardedReader, after: dict):
    """The ijson parse events of the trace events' fields that the staging reads, refusing
    nesting deeper than ``MAX_DEPTH`` (ijson keeps a prefix string per open level: memory
    quadratic in the depth).

    Of each event only the keys of ``_COLUMNS``, and of its args those of ``_ARGS``, pass,
    each the first time it appears (DuckDB's reader keeps the first of duplicate keys);
    the rest is dropped before ijson builds it, so a huge ``args`` entry costs neither
    memory nor DuckDB's object size limit. Events that held replaced (undecodable) bytes
    anywhere are counted in ``reader.undecodable``. The top-level keys after traceEvents
    are built into ``after`` (those before are read from the header)."""
    depth = 0
    drop = 0  # > 0: dropping the value of a key of the map at this depth
    where = 0  # 0 before traceEvents, 1 in its list, 2 after it
    keys: set = set()  # keys of the current event
    arg_keys: set = set()  # ... of its args
    replaced = False  # the current event held a replaced byte
    top_key, builder = None, None
    for event in events:
        prefix, kind, value = event
        opens = kind == "start_map" or kind == "start_array"
        if opens:
            depth += 1
            if depth > MAX_DEPTH:
                raise _TooDeep
        elif kind == "end_map" or kind == "end_array":
            depth -= 1
        reader.since_event = 0
        if where == 1:
            if reader.replaced and (kind == "string" or kind == "map_key") and "\ufffd" in value:
                replaced = True
            if depth <= 2 and not opens:  # an event ends (or the list)
                reader.since_item = 0
                if replaced:
                    reader.undecodable += 1
                    replaced = False
                if depth == 1:
                    where, reader.item = 2, "the part after traceEvents is larger than"
                    continue
            if drop:
                if depth == drop and not opens:
                    drop = 0
                continue
            if kind == "map_key":
                if depth == 3 and prefix == "traceEvents.item":
                    if value not in _EVENT_KEYS or value in keys:
                        drop = 3
                        continue
                    keys.add(value)
                elif depth == 4 and prefix == "traceEvents.item.args":
                    if value not in _ARG_KEYS or value in arg_keys:
                        drop = 4
                        continue
                    arg_keys.add(value)
            elif kind == "start_map":
                if depth == 3:
                    keys.clear()
                elif depth == 4 and prefix == "traceEvents.item.args":
                    arg_keys.clear()
            yield event
        elif where == 0:
            reader.since_item = 0  # the header is bounded by the first pass (HEADER_LIMIT)
            if depth == 1 and kind == "map_key":
                top_key = value
            elif depth == 2 and kind == "start_array" and top_key == "traceEvents":
                where = 1
        elif depth >= 1:  # after the events: keys built as orjson reads the native trailer
            if depth == 1 and kind == "map_key":
                top_key, builder = value, ijson.common.ObjectBuilder()
                continue
            # Non-integer numbers come as Decimal (use_float=False, which the events need):
            # as floats they are what orjson gives the native layout's trailer.
            builder.event(kind, float(value) if kind == "number" and not isinstance(value, int) else value)
            if depth == 1:
                after[top_key] = builder.value


def _stream_events(f, path: Path, writer: _ChunkWriter, stage, after: dict) -> None:
    """Fallback for any other layout: ijson's streaming parser, the fields staged of each
    event re-serialized one event per line and staged in files of about ``CHUNK_BYTES``;
    the top-level keys after traceEvents go into ``after``."""
    batch = []
    size = 0
    reader = _GuardedReader(f)
    # A small read size bounds what ijson parses per step before _checked sees the events:
    # ijson builds a prefix string per event, so a read of N opening brackets costs N^2.
    events = _checked(ijson.parse(reader, buf_size=4096, use_float=False), reader, after)

    def flush():
        data = b"".join(batch)
        chunk = writer.write(data, len(data))
        if chunk:
            stage([chunk])

    flagged = 0  # reader.undecodable as of the last event
    try:
        for event in ijson.items(events, "traceEvents.item"):
            if reader.undecodable > flagged and isinstance(event, dict):
                event[UNDECODABLE_KEY] = True  # _checked counted it: its bytes were replaced
            flagged = reader.undecodable
            try:
                line = orjson.dumps(event, default=str)
            except orjson.JSONEncodeError:  # integers beyond 64 bits
                line = json.dumps(event, default=str).encode()
            batch.append(b"\n" + line + b",")
            size += len(line)
            if size >= CHUNK_BYTES:
                flush()
                batch, size = [], 0
    except ijson.JSONError as e:  # IncompleteJSONError included
        problem = "truncated or malformed JSON" if isinstance(e, ijson.IncompleteJSONError) else "malformed JSON"
        raise _Malformed(problem, reader.error_offset(str(e)), str(e).splitlines()[0][:80]) from None
    except _TooDeep:
        raise InputError(path, f"JSON nested more than {MAX_DEPTH} levels deep: not a PyTorch profiler trace") from None
    except _TooLarge as e:
        raise InputError(path, f"{e} {EVENT_LIMIT >> 20} MB: not a PyTorch profiler trace") from None
    flush()
    writer.undecodable += reader.undecodable


def _int(value, bits: int = 32, minimum: int | None = None) -> int | None:
    """``value`` if it is an integer (not a bool) that fits a signed column of ``bits``
    bits and is at least ``minimum``; else None. Trace metadata is whatever the file says."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    low = -(1 << (bits - 1)) if minimum is None else minimum
    return value if low <= value < (1 << (bits - 1)) else None


def _rank(meta: dict, source_id: int) -> int:
    info = meta.get("distributedInfo")
    rank = _int(info.get("rank"), minimum=0) if isinstance(info, dict) else None
    return source_id if rank is None else rank


def ingest(con: duckdb.DuckDBPyConnection, path: Path, source_id: int) -> None:
    """Ingest one Kineto trace file into the canonical tables of ``con``.

    Args:
        con: a DuckDB connection where ``schema.sql`` has run.
        path: a ``.json`` or ``.json.gz`` trace (chosen by content).
        source_id: index of the file among the inputs; also its rank when the trace has
            no ``distributedInfo.rank``.

    Raises:
        InputError: empty, unreadable, not JSON, truncated gzip or JSON, no ``traceEvents``.
    """
    path = Path(path)
    with open(path, "rb") as probe:
        gz = probe.read(2) == b"\x1f\x8b"
    rank = None  # written while the file is staged (_staging_rank), once the header is read
    warn: dict[str, int] = {}
    other: dict[str, int] = {}  # other accelerators' device events by category
    events = [0]  # events read from the file
    staged = [0]  # ... of them in _stage

    def stage(chunk_paths: list[str]) -> None:
        into = "INSERT INTO _stage" if staged[0] else "CREATE OR REPLACE TEMP TABLE _stage AS"
        n = con.execute(f"{into} {_STAGE_SELECT}", [chunk_paths]).fetchall()[0][0]
        for chunk in chunk_paths:
            os.unlink(chunk)
        events[0] += n
        staged[0] += n
        if staged[0] >= STAGED_EVENTS:
            _insert_stage(con, rank, warn, other)
            staged[0] = 0

    _create_flows(con)
    try:
        with tempfile.TemporaryDirectory(prefix="wanscope-") as tmp:
            with _open(path, gz) as f:
                header, rest = _read_header(f, path)
                rank = _staging_rank(con, _header_dict(header, None, path), source_id)
                while rest.count(b"\n") < 2 and len(rest) < (1 << 20):  # the first event's first line
                    more = f.read(1 << 16)  # (the header read may stop right after the "[")
                    if not more:
                        break
                    rest += more
                layout = _Layout.detect(rest)
                trailer = None
                if layout is not None:
                    writer = _ChunkWriter(tmp, layout.marker)
                    try:
                        trailer = _staged_in_batches(layout.chunks(f, rest, path, writer.write), stage, STAGE_FILES)
                    except (_OtherLayout, duckdb.InvalidInputException, duckdb.OutOfMemoryException):
                        # Not valid JSON where it was cut, an odd layout that only looked like
                        # ours, or an event too large for DuckDB's reader: the streaming parser
                        # reads it again (keeping only the fields staged) and decides.
                        _discard_source(con, rank)
                        warn.clear()
                        other.clear()
                        events[0] = staged[0] = 0
                        layout = None
                after: dict = {}
                if layout is None:
                    f.seek(0)
                    writer = _ChunkWriter(tmp)
                    _stream_events(f, path, writer, stage, after)
            meta = _header_dict(header, trailer, path, layout.trailer_at if layout else 0)
            meta.update(after)
        if staged[0]:
            _insert_stage(con, rank, warn, other)
    except _Malformed as e:
        raise InputError(
            path, f"{e.problem} at {_where(path, gz, e.offset)}" + (f": {e.detail}" if e.detail else "")
        ) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(path, f"truncated or corrupt gzip ({e})") from None
    except duckdb.InvalidInputException as e:
        if "maximum_object_size" in str(e):  # the fields staged of one event pass DuckDB's limit
            raise InputError(
                path, "an event too large for DuckDB's JSON reader: not a PyTorch profiler trace"
            ) from None
        raise InputError(path, f"malformed JSON ({str(e).splitlines()[0][:120]})") from None
    except duckdb.Error as e:
        raise InputError(path, f"cannot ingest ({str(e).splitlines()[0][:120]})") from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    finally:
        con.execute("DROP TABLE IF EXISTS _stage")  # left by a failure

    if writer.undecodable:
        warn["undecodable_bytes"] = warn.get("undecodable_bytes", 0) + writer.undecodable
    _finish_source(con, path, source_id, _rank(meta, source_id), rank, meta, events[0], warn, other)


_TABLES = ("kernels", "memops", "api_calls", "cpu_ops", "cuda_syncs", "memory_events")


def _discard_source(con, rank: int) -> None:
    """Remove what a failed fast pass over one file inserted (its rows carry its staging
    rank, which no other file's rows have)."""
    for table in _TABLES:
        con.execute(f"DELETE FROM {table} WHERE rank = ?", [rank])
    con.execute("TRUNCATE _kineto_flows")
    con.execute("DROP TABLE IF EXISTS _stage")


def _staging_rank(con, header: dict, source_id: int) -> int:
    """The rank written while a file is staged: its rank as the keys before the events
    give it (``_rank``), or a placeholder where rows of an earlier file have that rank.
    ``_finish_source`` replaces it only when it is not the file's rank (a placeholder, or
    a ``distributedInfo`` after the events): an UPDATE of every row."""
    rank = _rank(header, source_id)
    used = " UNION ALL ".join(f"SELECT 1 FROM {t} WHERE rank = $rank" for t in ("sources", *_TABLES))
    if con.execute(f"SELECT count(*) FROM ({used})", {"rank": rank}).fetchall()[0][0]:
        return -1_000_000 - source_id
    return rank


def _insert_stage(con, rank: int, warn: dict[str, int], other: dict[str, int]) -> None:
    """Move the staged events (``_stage``) into the canonical tables with rank ``rank``,
    straight from the parsed rows (no second uncompressed copy); count their warnings (and
    into ``other`` the other accelerators' events by category); drop ``_stage``; compress
    what was moved (a checkpoint)."""
    counts = con.execute(
        "SELECT " + ", ".join(f"count(*) FILTER (warnings & {b} <> 0)" for b in _WARNING_BIT.values()) + " FROM _stage"
    ).fetchall()[0]
    for kind, n in zip(_WARNINGS, counts):
        if n:
            warn[kind] = warn.get(kind, 0) + n
    if warn.get("other_accelerator"):
        for cat, n in con.execute(
            f"SELECT name, count(*) FROM _stage WHERE warnings & {_WARNING_BIT['other_accelerator']} <> 0 GROUP BY name"
        ).fetchall():
            other[cat] = other.get(cat, 0) + n
    con.execute("INSERT INTO _kineto_flows SELECT name, kind FROM _stage WHERE dest = 'flow'")
    con.execute(f"""
        INSERT INTO kernels
        SELECT {rank}, device, stream, start_ns, start_ns + dur_ns, dur_ns, name, corr, NULL,
               try_cast(arg1 AS INTEGER[]), try_cast(arg2 AS INTEGER[]), n1, n2, NULL
        FROM _stage WHERE dest = 'kernel'
    """)
    con.execute(f"""
        INSERT INTO memops
        SELECT kind, CASE WHEN kind = 'memcpy' THEN coalesce(regexp_extract(name, 'Memcpy (\\w+)', 1), 'unknown') END,
               n1, name, {rank}, device, stream, start_ns, start_ns + dur_ns, dur_ns, corr, NULL
        FROM _stage WHERE dest = 'memop'
    """)
    con.execute(f"""
        INSERT INTO api_calls
        SELECT kind, regexp_replace(name, '_v\\d{{4,}}$', ''), name, {rank}, pid, tid,
               start_ns, start_ns + dur_ns, dur_ns, corr
        FROM _stage WHERE dest = 'api'
    """)
    con.execute(f"""
        INSERT INTO cpu_ops
        SELECT NULL, NULL, NULL, kind, name, {rank}, pid, tid, start_ns, start_ns + dur_ns, dur_ns, ext,
               arg1, arg2, arg3
        FROM _stage WHERE dest = 'host'
    """)
    con.execute(f"""
        INSERT INTO memory_events
        SELECT {rank}, device, pid, tid, start_ns, n1, n2, n3
        FROM _stage WHERE dest = 'memory'
    """)
    con.execute(f"""
        INSERT INTO cuda_syncs
        SELECT name, {rank}, device, stream, start_ns, start_ns + dur_ns, corr, NULL
        FROM _stage WHERE dest = 'sync'
    """)
    con.execute("DROP TABLE _stage")
    # Rows appended in runs shorter than a row group per thread stay uncompressed until a
    # checkpoint (the 522 MB benchmark trace's tables: ~82 MB so, ~18 MB compressed); they
    # would fill the buffer pool, which then spills them and purges the allocator (trace/load.py).
    con.execute("CHECKPOINT")


# Parsed events wait in _stage and move to the (compressed) canonical tables in runs of at
# least this many: each INSERT into a compressed table re-compresses its last partial row
# group: moving ~140,000 events at a time cost ~2x the CPU of runs of ~280,000. One staging
# statement (STAGE_FILES of CHUNK_BYTES) holds ~230,000 events of the benchmark traces, so that
# each statement's rows move on at once.
STAGED_EVENTS = 200_000


def _create_flows(con) -> None:
    """The per-file temporary table of flow halves (read and dropped by ``_finish_source``)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _kineto_flows (id VARCHAR, ph VARCHAR)")


def _finish_source(
    con,
    path: Path,
    source_id: int,
    rank: int,
    staged_as: int,
    meta: dict,
    events: int,
    warn: dict,
    other: dict | None = None,
) -> None:
    """Set the rank of this source's rows (written as ``staged_as``), record devices, meta
    and warnings.

    A ``rank`` that an earlier input already has (two jobs' rank 0, two runs of one worker
    in one folder) is replaced by the next free one, ``max(source_id, 1 + highest rank
    used)``, so that the two stay apart; the rank claimed goes to ``meta`` as
    ``CLAIMED_RANK_KEY``."""
    unpaired = con.execute("""
        SELECT count(*) FROM (SELECT id FROM _kineto_flows GROUP BY id
                              HAVING count(*) FILTER (ph = 's') = 0 OR count(*) FILTER (ph = 'f') = 0)
    """).fetchall()[0][0]
    con.execute("DROP TABLE _kineto_flows")
    if unpaired:
        warn["unpaired_flow"] = unpaired
    claimed = None
    if rank != staged_as:  # else the rank was free when the file was staged (_staging_rank)
        used = " UNION ".join(f"SELECT DISTINCT rank FROM {t} WHERE rank <> $staged" for t in ("sources", *_TABLES))
        taken = {r for (r,) in con.execute(used, {"staged": staged_as}).fetchall()}
        if rank in taken:
            claimed, rank = rank, max(source_id, 1 + max(taken))
    if rank != staged_as:
        for table in _TABLES:
            con.execute(f"UPDATE {table} SET rank = ? WHERE rank = ?", [rank, staged_as])
    con.execute("INSERT INTO sources VALUES (?, ?, 'kineto', ?, ?)", [source_id, str(path), rank, events])
    clipped, partial = clip_overruns(con, [rank])
    if clipped:
        warn["clipped_duration"] = clipped
    if partial:
        con.execute("INSERT INTO meta VALUES (?, ?, ?)", [source_id, PARTIAL_OVERLAPS_KEY, str(partial)])
    devices = meta.get("deviceProperties")
    for dev in devices if isinstance(devices, list) else []:
        if not isinstance(dev, dict) or _int(dev.get("id"), minimum=0) is None:
            continue  # a device entry without a usable index describes nothing we can join
        major, minor = _int(dev.get("computeMajor")), _int(dev.get("computeMinor"))
        cc = f"{major}.{minor}" if major is not None and minor is not None else None
        name = dev.get("name")
        con.execute(
            "INSERT INTO devices VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)",
            [
                rank,
                dev["id"],
                name if isinstance(name, str) else None,
                cc,
                _int(dev.get("numSms")),
                _int(dev.get("totalGlobalMem"), bits=64, minimum=0),
            ],
        )
    for key, value in meta.items():
        if key in ("deviceProperties", "traceEvents", CLAIMED_RANK_KEY, PARTIAL_OVERLAPS_KEY, OTHER_ACCELERATOR_KEY):
            continue
        con.execute("INSERT INTO meta VALUES (?, ?, ?)", [source_id, key, _meta_text(value)[:4096]])
    if claimed is not None:
        con.execute("INSERT INTO meta VALUES (?, ?, ?)", [source_id, CLAIMED_RANK_KEY, str(claimed)])
    if other:
        con.execute(
            "INSERT INTO meta VALUES (?, ?, ?)",
            [source_id, OTHER_ACCELERATOR_KEY, json.dumps(dict(sorted(other.items())))],
        )
    for kind, n in sorted(warn.items()):
        con.execute("INSERT INTO ingest_warnings VALUES (?, ?, ?)", [source_id, kind, n])
