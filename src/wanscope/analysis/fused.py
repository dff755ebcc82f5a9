"""Fused Triton kernels of torch.compile (Inductor): what each one is, parsed from its name.

Inductor names a generated kernel ``triton_<kind>_fused_<op>_<op>..._<index>``
(``torch/_inductor/codegen/triton.py``, ``define_kernel``; ``utils.py``,
``get_fused_kernel_name``):

- ``kind``: the first three letters of the kernel's heuristics decorator (``KINDS``).
- the ops: the top-level aten ops (before decomposition) of the fused graph nodes, by
  overload packet (``aten::add.Tensor`` -> ``add``), each once, sorted by name, so the order
  is alphabetical, not execution order. Some Inductor versions cap how many ops a name
  lists (``config.kernel_name_max_ops``, 10), so ``ops`` may be partial.
- ``index``: a counter per compiled graph, dropped here.

Op names contain underscores (``_to_copy``, ``native_layer_norm``), so the ops are found
by greedy longest match of the name's ``_``-separated tokens against ``aten_ops.txt`` (the
packet names of every aten and prims op and every higher-order op, generated from torch by
``scripts/gen_aten_ops.py``). Tokens no op matches are kept in ``ops`` in their place and
listed again in ``unmatched`` (``descriptive_names="torch"`` puts module names there).

Older and other forms handled: no kind (torch 2.0: ``triton_fused_add_0``); Triton 2.x's
argument specializations appended to the compiled name (``triton__0d1d2d3de4e`` is the
function ``triton_`` with arguments 0-4 specialized; ``triton_poi_fused_add_0_0d1d2de``);
a hash-like token after the index (8 or more lowercase letters and digits, both present);
both are dropped into ``suffix``. Names without ops (``triton_poi__0`` with descriptive names off, or
``triton_`` with ``unique_kernel_names`` off). When the GPU name lists no ops, the host
range Inductor opens around each launch (a record_function named after the kernel's full
descriptive name) supplies them where the trace has it (``launched_as``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from wanscope.analysis.scope import Scope
from wanscope.analysis.stacks import containment_key

PREFIX = "triton_"
KINDS = {
    "poi": "pointwise",
    "red": "reduction",
    "per": "persistent_reduction",
    "tem": "template",
    "for": "foreach",
    "spl": "split_scan",
    "unk": "unknown",
}
OPS_PARTIAL_NOTE = (
    "ops are parsed from Inductor's kernel names: each op once, sorted by name (not in execution "
    "order), and some Inductor versions list at most 10 (config.kernel_name_max_ops), so a "
    "kernel's ops may be partial"
)
_HASH = re.compile(r"(?=[0-9a-z]*[0-9])(?=[0-9a-z]*[a-z])[0-9a-z]{8,}")


@lru_cache(maxsize=1)
def op_names() -> frozenset[str]:
    """The op names a kernel name is matched against (package data ``aten_ops.txt``)."""
    text = resources.files("wanscope.analysis").joinpath("aten_ops.txt").read_text()
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


@lru_cache(maxsize=1)
def _max_op_tokens() -> int:
    return max(name.count("_") + 1 for name in op_names())


@dataclass(frozen=True)
class KernelName:
    """What a Triton kernel's name says.

    Attributes:
        kind: ``poi``, ``red``, ``per``, ``tem``, ``for``, ``spl``, ``unk`` (see ``KINDS``),
            or None when the name has no kind (old style).
        ops: op names in the order the name lists them, unmatched tokens kept in place.
        unmatched: the items of ``ops`` that are not op names.
        suffix: text dropped after the ops besides the index (a Triton specialization
            suffix or a hash), or None.
    """

    kind: str | None
    ops: tuple[str, ...]
    unmatched: tuple[str, ...]
    suffix: str | None


def split_ops(text: str) -> tuple[list[str], list[str]]:
    """Split ``op_op_..._op`` into op names by greedy longest match on ``_`` tokens.

    Splitting ``A_B`` on ``_`` gives A's tokens then B's, so an op with a leading
    underscore (``_to_copy``) is a run of tokens like any other. A match does not end in
    an empty token (a trailing underscore) unless nothing follows it: in
    ``_foreach_addcdiv__foreach_div`` the underscore before ``_foreach_div`` belongs to it,
    not to the in-place ``_foreach_addcdiv_`` (Inductor's graphs are functionalized, so
    in-place ops are rare in names). A run of tokens no op matches becomes one unmatched
    item. Returns (items in order, unmatched).
    """
    if not text:
        return [], []
    names, longest = op_names(), _max_op_tokens()
    tokens = text.split("_")
    items: list[str] = []
    unmatched: list[str] = []
    run: list[str] = []

    def flush():
        if run and (joined := "_".join(run)):
            items.append(joined)
            unmatched.append(joined)
        run.clear()

    i = 0
    while i < len(tokens):
        for j in range(min(len(tokens), i + longest), i, -1):
            candidate = "_".join(tokens[i:j])
            if candidate in names and (tokens[j - 1] or j == len(tokens)):
                flush()
                items.append(candidate)
                i = j
                break
        else:
            run.append(tokens[i])
            i += 1
    flush()
    return items, unmatched


def is_specialization(token: str) -> bool:
    """True for Triton's argument-specialization suffix (``0d1d2de``: argument 0 divisible
    by 16, ...; ``c`` equal to 1, ``d`` divisible by 16, ``e`` by 8): the argument numbers
    from 0 in order, each followed by those letters; at least two arguments or one letter,
    so that a plain index ``0`` is not one."""
    pos = arg = 0
    letters = False
    while pos < len(token):
        number = str(arg)
        if not token.startswith(number, pos):
            return False
        pos += len(number)
        while pos < len(token) and token[pos] in "cde":
            pos += 1
            letters = True
        arg += 1
    return arg >= 2 or letters


def parse_kernel_name(name: str) -> KernelName | None:
    """Parse an Inductor kernel name; None when ``name`` is not a Triton kernel name
    (does not start with ``triton_``)."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :]
    kind = None
    head, sep, tail = rest.partition("_")
    if sep and head in KINDS:
        kind, rest = head, tail
    if rest == "fused" or rest.startswith("fused_"):
        rest = rest[len("fused_") :]
    tokens = rest.split("_")
    dropped = []
    # Anything after the index is a suffix; the index itself is the last thing Inductor adds.
    while len(tokens) > 1 and (is_specialization(tokens[-1]) or _HASH.fullmatch(tokens[-1])):
        dropped.insert(0, tokens.pop())
    if tokens and tokens[-1].isdigit():
        tokens.pop()
    ops, unmatched = split_ops("_".join(tokens))
    return KernelName(kind, tuple(ops), tuple(unmatched), "_".join(dropped) or None)


_FUSED_SQL = """
WITH activity AS (FROM gpu_activity({args})),
tk AS (
  SELECT row_number() OVER () AS kid, rank, device, name, dur_ns, correlation, pid
  FROM activity WHERE kind = 'kernel' AND starts_with(name, '{prefix}')),
host AS (
  SELECT tk.kid, arg_max(o.name, {containment}) AS launched_as
  FROM tk
  JOIN api_calls c ON c.rank = tk.rank AND c.pid = tk.pid AND c.correlation = tk.correlation
  JOIN cpu_ops o ON o.rank = c.rank AND o.pid = c.pid AND o.tid = c.tid
               AND o.start_ns <= c.start_ns AND o.end_ns >= c.start_ns AND starts_with(o.name, '{prefix}')
  GROUP BY tk.kid),
totals AS (SELECT {keys} sum(dur_ns) AS kernel_total FROM activity WHERE kind = 'kernel' GROUP BY ALL)
SELECT {keys} name, launched_as, count(*) AS n, sum(dur_ns) AS total, min(dur_ns), max(dur_ns),
       any_value(kernel_total)
FROM tk LEFT JOIN host USING (kid) {join_totals}
GROUP BY ALL ORDER BY {keys} total DESC, name, launched_as
"""


def _item(name: str, launched_as: str | None, n: int, total: int, lo: int, hi: int, kernel_total: int) -> dict:
    parsed = parse_kernel_name(name)
    ops_from = "name" if parsed.ops else None
    if not parsed.ops and launched_as and (host := parse_kernel_name(launched_as)) and host.ops:
        parsed = KernelName(parsed.kind or host.kind, host.ops, host.unmatched, parsed.suffix)
        ops_from = "launch_range"
    return {
        "name": name,
        "launched_as": launched_as,
        "kind": parsed.kind,
        "ops": list(parsed.ops),
        "unmatched": list(parsed.unmatched),
        "ops_from": ops_from,
        "suffix": parsed.suffix,
        "count": n,
        "total_ns": int(total),
        "mean_ns": round(total / n),
        "min_ns": int(lo),
        "max_ns": int(hi),
        "pct": round(100.0 * total / kernel_total, 4) if kernel_total else None,
    }


def fused_kernels(con, scope: Scope | None = None, per_device: bool = True) -> dict[tuple, list[dict]]:
    """Every Triton kernel (name starting ``triton_``) in scope with what its name says.

    Args:
        con: DuckDB connection with the canonical tables.
        scope: steps to restrict to (default: the whole trace).
        per_device: group by (rank, device); else over the whole trace (key ``()``).

    Returns:
        key -> rows by total time: ``name`` (as on the GPU), ``launched_as`` (the innermost
        ``triton_*`` host range open at the launch, or None), ``kind``, ``ops``,
        ``unmatched``, ``ops_from`` (``name``, ``launch_range`` or None when neither lists
        ops), ``suffix``, ``count`` (launches), ``total_ns``, ``mean_ns`` (rounded to the nearest
        ns), ``min_ns``, ``max_ns``, ``pct`` (share of summed kernel time of the key).
    """
    keys = "rank, device," if per_device else ""
    join_totals = "JOIN totals USING (rank, device)" if per_device else "CROSS JOIN totals"
    sql = _FUSED_SQL.format(
        args=(scope or Scope()).args,
        prefix=PREFIX,
        keys=keys,
        join_totals=join_totals,
        containment=containment_key("o"),
    )
    out: dict[tuple, list[dict]] = defaultdict(list)
    for row in con.execute(sql).fetchall():
        key, values = (tuple(row[:2]), row[2:]) if per_device else ((), row)
        out[key].append(_item(*values))
    return out


def aten_calls(con) -> dict[str, int]:
    """Op family (``aten::add`` -> ``add``) -> host calls of it recorded in the trace
    (nested calls count each: ``aten::to`` -> ``aten::_to_copy`` -> ``aten::copy_``)."""
    return {
        name: int(n)
        for name, n in con.execute(
            "SELECT substr(name, 7), count(*) FROM cpu_ops WHERE starts_with(name, 'aten::') GROUP BY ALL"
        ).fetchall()
    }


def ops_summary(fused: list[dict], eager: dict[str, int], compiled: dict[str, int]) -> list[dict]:
    """Which eager op families went into which fused kernels.

    Args:
        fused: rows of :func:`fused_kernels` for the compiled trace.
        eager: :func:`aten_calls` of the eager trace.
        compiled: :func:`aten_calls` of the compiled trace (ops still run as aten ops there).

    Returns:
        One row per op listed in a fused kernel name, by eager calls then fused time:
        ``op``, ``eager_calls``, ``compiled_calls``, ``kernels`` (names of the fused kernels
        listing it), ``launches`` and ``total_ns`` of those kernels (a kernel listing
        several ops counts in full for each).
    """
    rows: dict[str, dict] = {}
    for k in fused:
        for op in k["ops"]:
            if op in k["unmatched"]:
                continue
            row = rows.setdefault(
                op,
                {
                    "op": op,
                    "eager_calls": eager.get(op, 0),
                    "compiled_calls": compiled.get(op, 0),
                    "kernels": [],
                    "launches": 0,
                    "total_ns": 0,
                },
            )
            row["kernels"].append(k["name"] if k["ops_from"] != "launch_range" else k["launched_as"])
            row["launches"] += k["count"]
            row["total_ns"] += k["total_ns"]
    return sorted(rows.values(), key=lambda r: (-r["eager_calls"], -r["total_ns"], r["op"]))
