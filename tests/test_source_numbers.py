"""Docstrings and comments under src/ state contracts; measured figures live in
benchmarks/RESULTS.md. This test rejects a measurement there: a number followed by a time or
rate unit (``454.6 ms``, ``650 us``, ``3.9 s``, ``616 TFLOP/s``, ``2,122 GB/s``) or a speed ratio
(``0.871x``). What looks like one but is a contract, a default, a datasheet peak or a unit
conversion is named in ALLOWED, each with its reason.

Comments come from ``tokenize`` and docstrings (module, class, function) from ``ast`` in every
.py file under src/, plus the ``--`` and ``/* */`` comments of the .sql files there. Help strings
and other string literals are not scanned. Numbers wrapped across a line break count as well
("370.1" at a line's end, "ms" at the next one's start)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

# A number (not part of a name, a version, a power or a dotted path) and a unit after it.
# Time units: ns, us, µs/μs, ms, s, sec(onds), min(utes), h(ours). Rates: anything per second
# in FLOP or bytes (TFLOP/s, TFLOPS, GB/s, GiB/s, TB/s, MB/s, ...). Ratios: a decimal number
# and an x (0.87x, 1.9x), so "2x H200", "B x L" and shapes like 832x480x81 do not count.
_NUMBER = r"(?<![\w.^/,])\d+(?:,\d{3})*(?:\.\d+)?"
_TIME = r"(?:ns|us|µs|μs|ms|s|secs?|seconds?|mins?|minutes?|h|hours?)(?![\w^\[(])"
_RATE = r"(?:[kKMGTP]?i?B/s|[kKMGTP]?FLOP/s|[kKMGTP]?FLOPS|[kKMGTP]i?B/sec)(?!\w)"
MEASUREMENT = re.compile(rf"(?P<unit>{_NUMBER}\s?(?:{_RATE}|{_TIME}))|(?P<ratio>(?<![\w.^/])\d+\.\d+x(?![\w]))")

# A number right after a comparison is a bound (a contract: "<= 1.25x SDPA's error", "<= 10 s"),
# not a measurement.
BOUND = re.compile(r"(?:<=|>=|<|(?<!-)>|≤|≥|min\(|max\()\s*$")  # "->" is no bound

# (file under src/, exact text in one comment or docstring, why it is not a measurement).
# Whitespace in the text matches any run of whitespace, so a phrase may wrap. An entry that no
# longer matches anything fails the test, so the list cannot go stale.
ALLOWED: list[tuple[str, str, str]] = [
    (
        "src/wanscope/analysis/gaps.py",
        "Histogram bins (ns): <1 us, 1-10 us, 10-100 us, 0.1-1 ms, >=1 ms",
        "the histogram's bin edges: an output contract",
    ),
    ("src/wanscope/ncu/units.py", "``11.17 usecond`` becomes exactly 11170.0 ns", "a unit conversion, by example"),
    ("src/wanscope/report/diff_text.py", "``+1.200 ms``, ``-350 ns``", "the output format, by example"),
    ("src/wanscope/stats/gpu_gaps.py", "Defaults as NVIDIA's: 500 ms", "a default (NVIDIA's gpu_gaps rule's)"),
    ("src/wanscope/stats/report.py", "rounded to 0.1 ns", "the output's precision: a contract"),
]


def _collapse(text: str) -> tuple[str, list[int]]:
    """``text`` with every run of whitespace as one space, and each kept character's index in
    ``text``."""
    out, index = [], []
    space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not space:
                out.append(" ")
                index.append(i)
            space = True
        else:
            out.append(ch)
            index.append(i)
            space = False
    return "".join(out), index


def python_texts(source: str) -> list[tuple[int, str]]:
    """(first line, text) of every comment and every module, class and function docstring in
    ``source``."""
    texts = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            texts.append((tok.start[0], tok.string))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    texts.append((body[0].value.lineno, value))
    return texts


def sql_texts(source: str) -> list[tuple[int, str]]:
    """(first line, text) of every ``--`` and ``/* */`` comment in ``source`` (quotes skipped)."""
    texts, i, line, n = [], 0, 1, len(source)
    while i < n:
        ch = source[i]
        if ch == "'" or ch == '"':
            end = source.find(ch, i + 1)
            end = n if end < 0 else end + 1
            line += source.count("\n", i, end)
            i = end
        elif source.startswith("--", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            texts.append((line, source[i:end]))
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            texts.append((line, source[i:end]))
            line += source.count("\n", i, end)
            i = end
        else:
            line += ch == "\n"
            i += 1
    return texts


def measurements(
    path: str, texts: list[tuple[int, str]], allowed: list[tuple[str, str, str]], used: set[int] | None = None
) -> list[str]:
    """``path:line: match  (context)`` for each measurement in ``texts`` that no entry of
    ``allowed`` for ``path`` covers; the indices of the entries that covered one go into
    ``used``."""
    found = []
    mine = [(k, re.compile(r"\s+".join(map(re.escape, phrase.split())))) for k, (p, phrase, _) in enumerate(allowed)]
    mine = [(k, rx) for k, rx in mine if allowed[k][0] == path]
    for first_line, text in texts:
        flat, index = _collapse(text)
        spans = [(k, m.span()) for k, rx in mine for m in rx.finditer(flat)]
        for m in MEASUREMENT.finditer(flat):
            if BOUND.search(flat, max(0, m.start() - 8), m.start()):
                continue
            cover = [k for k, (a, b) in spans if a <= m.start() and m.end() <= b]
            if cover:
                if used is not None:
                    used.update(cover)
                continue
            line = first_line + text.count("\n", 0, index[m.start()])
            context = flat[max(0, m.start() - 40) : m.end() + 20]
            found.append(f"{path}:{line}: {m.group(0)!r} in ...{context}...")
    return found


def source_texts(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return python_texts(text) if path.suffix == ".py" else sql_texts(text)


def _src_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".py", ".sql") and p.is_file())


def test_no_measurements_under_src():
    used: set[int] = set()
    found = []
    for path in _src_files():
        rel = path.relative_to(REPO).as_posix()
        found += measurements(rel, source_texts(path), ALLOWED, used)
    stale = [f"{p}: {phrase!r} ({why})" for k, (p, phrase, why) in enumerate(ALLOWED) if k not in used]
    assert not found, (
        "measured figures in docstrings or comments under src/ (move them to benchmarks/RESULTS.md and link "
        "the section; a contract or default goes into ALLOWED with its reason):\n" + "\n".join(found)
    )
    assert not stale, "ALLOWED entries that match nothing any more:\n" + "\n".join(stale)


def test_allowed_entries_have_reasons():
    for path, phrase, why in ALLOWED:
        assert (SRC.parent / path).is_file(), path
        assert phrase.strip() and why.strip(), (path, phrase)


# The check itself: made-up sources with known measurements must be caught, and an allowlisted
# contract must not be.
_FAKE = '''"""Module docstring: the forward takes 454.6 ms on an H200."""


def f(x):
    """Returns x [B, L, C] bf16; raises ValueError on a bad shape. The kernel runs at 616
    TFLOP/s and 2,122 GB/s, 0.871x cuDNN's time; warm-up 6.2 s."""
    # 9.65 against 9.59 ms at [1, 32760, 12, 128]; 1.9x faster; 352 us with 8 warps
    return x  # times in ns; shape 832x480x81 on 2x H200; timeout default 300 s; error <= 1.25x, warm-up < 10 s
'''


def _matches(found: list[str]) -> list[str]:
    return [re.search(r": '(.*?)' in \.\.\.", f).group(1) for f in found]


def test_catches_made_up_measurements():
    found = measurements("src/fake.py", python_texts(_FAKE), [])
    assert _matches(found) == [
        "9.59 ms",  # comments first, in order
        "1.9x",
        "352 us",
        "300 s",  # a default: caught until allowlisted
        "454.6 ms",  # then docstrings: the module's
        "616 TFLOP/s",  # wrapped across a line break
        "2,122 GB/s",
        "0.871x",
        "6.2 s",
    ], found
    lines = [f.split(": ")[0] for f in found]
    assert lines == ["src/fake.py:7"] * 3 + ["src/fake.py:8", "src/fake.py:1"] + [
        "src/fake.py:5",
        "src/fake.py:6",
        "src/fake.py:6",
        "src/fake.py:6",
    ], lines


def test_allowlisted_contract_is_not_caught():
    allowed = [("src/fake.py", "timeout default 300 s", "a default, not a measurement")]
    used: set[int] = set()
    found = measurements("src/fake.py", python_texts(_FAKE), allowed, used)
    assert used == {0}
    assert not any("'300 s'" in f for f in found)
    assert any("'454.6 ms'" in f for f in found)  # the rest is still caught
    # the same phrase allowlisted for another file covers nothing here
    assert any(
        "'300 s'" in f for f in measurements("src/fake.py", python_texts(_FAKE), [("src/other.py",) + allowed[0][1:]])
    )


def test_sql_comments_are_scanned():
    sql = "-- ingest took 3.91 s on the 522 MB file\nSELECT '1.5 ms' AS label; /* rewrite 0.49\n -> 0.2 s */\n"
    found = measurements("src/fake.sql", sql_texts(sql), [])
    assert [f.split(": ")[0] for f in found] == ["src/fake.sql:1", "src/fake.sql:3"]
    assert not any("1.5 ms" in f for f in found)  # a string literal, not a comment


@pytest.mark.parametrize("text", ["unit: ns", "dur_ns > 5e6", "2^63 ns", "sm_90 s", "v1.5x", "0.5x8", "N(0, s^2)"])
def test_not_measurements(text):
    assert not MEASUREMENT.search(text), text


@pytest.mark.parametrize("text", ["<= 1.25x SDPA's", "<= min(1.05x cuDNN's", "warm-up < 10 s", ">= 1.9x"])
def test_bounds_are_not_measurements(text):
    assert not measurements("src/fake.py", [(1, text)], []), text


@pytest.mark.parametrize("text", ["took 1.9x less", "within 1.1x", "10 s", "0.885x the best compile"])
def test_ratios_and_times_without_a_bound_are(text):
    assert measurements("src/fake.py", [(1, text)], []), text
