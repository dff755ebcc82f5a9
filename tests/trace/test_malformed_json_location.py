"""Malformed JSON errors give the byte offset and the line of the problem: line and
column counted from 1 and the byte from 0 (as Python's json says it), in the uncompressed
JSON of a gzip file, whichever layout the file has and wherever the problem is (inside an
event, between events, after the events, at a cut)."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from wanscope.errors import InputError
from wanscope.trace import open_traces

WHERE = re.compile(r"at line (\d+), column (\d+) \(byte (\d+)( of the uncompressed JSON)?\)")


def kernel(i: int) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": f"k{i}",
        "pid": 0,
        "tid": 7,
        "ts": 10 + 10 * i,
        "dur": 5,
        "args": {"device": 0, "stream": 7, "correlation": i},
    }


def block(e) -> str:
    return "  {\n    " + ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()) + "\n  }"


def text(layout: str, n: int) -> str:
    events = [kernel(i) for i in range(n)]
    if layout == "native":
        return '{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + ",\n".join(map(block, events)) + "\n  ]\n}\n"
    if layout == "lines":
        return '{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + "\n]}\n"
    return json.dumps({"traceEvents": events}, separators=(",", ":"))


def error_of(path) -> str:
    with pytest.raises(InputError) as e:
        open_traces([path])
    return str(e.value)


def located(message: str, data: bytes, gz: bool) -> int:
    """The byte the message names, checked against its line and column in ``data``."""
    m = WHERE.search(message)
    assert m, message
    line, column, offset = int(m[1]), int(m[2]), int(m[3])
    assert bool(m[4]) == gz
    assert line == data[:offset].count(b"\n") + 1
    assert column == offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return offset


def write(tmp_path, data: bytes, gz: bool):
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# name: (text of an event, what it becomes); the problem is in what replaces it, and yajl
# notices it there or in the key or value right after it
DEFECTS = {
    "bad_literal": ("5,", "tru,"),  # "dur": tru
    "missing_comma": ('"kernel",', '"kernel"'),  # "cat": "kernel" "name": ...
    "bad_number": ('"ts": ', '"ts": 1.2.'),
}


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("n", [3, 3000])  # within the first read, and past many reads
@pytest.mark.parametrize("layout", ["native", "lines", "min"])
@pytest.mark.parametrize("defect", DEFECTS)
def test_malformed_json_location_inside_an_event(tmp_path, defect, layout, n, gz):
    good = text(layout, n)
    find, new = DEFECTS[defect]
    if layout == "min":
        find, new = find.replace(": ", ":"), new.replace(": ", ":")
    target = n - 2  # a late event: its name is unique
    at = good.index(f'"k{target}"')
    at = good.index(find, good.rindex("{", 0, at))
    data = (good[:at] + new + good[at + len(find) :]).encode()
    message = error_of(write(tmp_path, data, gz))
    assert "malformed JSON" in message
    offset = located(message, data, gz)
    end = data.index(b",", at + len(new) - 1)  # the end of the value or key after the problem
    assert at <= offset <= end + 1, (message, data[at - 20 : at + 30])


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", ["native", "lines", "min"])
def test_malformed_json_location_between_events(tmp_path, layout, gz):
    good = text(layout, 200)
    sep = {"native": "  },\n  {", "lines": "},\n{", "min": "},{"}[layout]
    at = good.index(sep, good.index('"k150"'))
    data = (good[:at] + sep.replace(",", "", 1) + good[at + len(sep) :]).encode()  # a comma missing
    offset = located(error_of(write(tmp_path, data, gz)), data, gz)
    assert at <= offset <= at + len(sep) + 2


@pytest.mark.parametrize(
    "tail, bad",
    [
        (',\n  "x": [1, 2,, 3]\n}\n', ",, 3"),
        ("\n}\ntrailing\n", "trailing"),
        (',\n  "a": 1,\n  "b": nul\n}\n', "nul"),
    ],
)
@pytest.mark.parametrize("layout", ["native", "min"])
def test_malformed_json_location_after_the_events(tmp_path, layout, tail, bad):
    good = text(layout, 50)
    cut = good.rindex("]")
    data = (good[: cut + 1] + tail).encode()
    message = error_of(write(tmp_path, data, False))
    offset = located(message, data, False)
    at = data.index(bad.encode(), cut)
    assert at <= offset <= at + len(bad) + 1, message


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", ["native", "lines", "min"])
def test_malformed_json_location_of_a_cut(tmp_path, layout, gz):
    good = text(layout, 500)
    data = good[: good.index('"k400"') + 3].encode()  # cut inside an event's name
    message = error_of(write(tmp_path, data, gz))
    assert "truncated" in message
    assert located(message, data, gz) == len(data)


def test_malformed_json_location_of_a_value_that_is_no_object(tmp_path):
    data = b"\n\n  [1, 2]\n"  # gzip: the content is read as JSON, which must be an object
    message = error_of(write(tmp_path, data, True))
    assert "expected an object" in message
    assert located(message, data, True) == 4
