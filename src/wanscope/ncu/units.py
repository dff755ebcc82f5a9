"""Nsight Compute values and units, converted once to base units.

ncu prints each metric either in "base" units (``--print-units base``) or auto-scaled for
reading (the default): ``11.17 usecond``, ``102.40 Kbyte``, ``1.51 cycle/nsecond``,
``1.20 Gbyte/second``. Its prefixes are decimal (SI): ``102.40 Kbyte`` is the 102,400-byte
shared-memory carveout (compare the same report's ``--print-units base`` export in
the test fixtures' ``ncu/derived`` reports). Recent releases name the base units ``ns``, ``byte/s`` and
``hz``; 2024.1 and older name them ``nsecond``, ``byte/second`` and ``cycle/second``.

wanscope's base units, the names every reader returns:

- durations in ``ns``; rates per second (``byte/s``, ``inst/s``); frequencies in ``hz``;
- counts without prefix (``byte``, ``inst``, ``cycle``, ``warp``, ...), ratios as given
  (``inst/cycle``, ``byte/block``, ``register/thread``), and ``%`` as a percentage (0-100).

Values are scaled in decimal arithmetic, so ``11.17 usecond`` becomes exactly 11170.0 ns.
Auto-scaled values carry only the digits ncu printed: ``1.02 Kbyte/block`` is 1020 bytes
although the driver reserved 1,024; read reports exported with ``--print-units base`` (or
the ``.ncu-rep`` itself) when exact values matter.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# seconds per unit of time, as ncu spells them
_TIME_S = {
    "ns": Decimal("1e-9"),
    "nsecond": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "usecond": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "msecond": Decimal("1e-3"),
    "s": Decimal(1),
    "second": Decimal(1),
}
_NS_PER_S = Decimal("1e9")
_FREQ_HZ = {"hz": Decimal(1), "khz": Decimal("1e3"), "mhz": Decimal("1e6"), "ghz": Decimal("1e9")}
_SI = {"K": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15")}
# words ncu may put an SI prefix on (Kbyte, Minst, Gcycle, ...)
_COUNT_WORDS = {
    "byte",
    "inst",
    "cycle",
    "warp",
    "thread",
    "block",
    "sector",
    "request",
    "wavefront",
    "register",
    "sample",
    "cluster",
    "SM",
    "instruction",
    "bit",
    "pass",
    "launch",
}
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _word(word: str) -> tuple[Decimal, str] | None:
    """(factor, base word) for a count word with an optional SI prefix, else None."""
    if word in _COUNT_WORDS:
        return Decimal(1), word
    if len(word) > 1 and word[0] in _SI and word[1:] in _COUNT_WORDS:
        return _SI[word[0]], word[1:]
    return None


def base_unit(unit: str) -> tuple[Decimal, str]:
    """The factor that turns a value in ``unit`` into wanscope's base unit, and that unit.

    >>> base_unit("usecond")
    (Decimal('1000.000'), 'ns')

    Unknown units come back unchanged with factor 1 (ncu adds units over releases; a value
    in an unknown unit is still the value ncu printed).
    """
    u = unit.strip()
    if u in ("", "%"):
        return Decimal(1), u
    if u in _TIME_S:
        return _TIME_S[u] * _NS_PER_S, "ns"
    if u.lower() in _FREQ_HZ:
        return _FREQ_HZ[u.lower()], "hz"
    if "/" in u:
        num, _, den = u.partition("/")
        n = _word(num)
        if n is not None and den in _TIME_S:
            factor = n[0] / _TIME_S[den]
            return factor, "hz" if n[1] == "cycle" else f"{n[1]}/s"
        d = _word(den)
        if n is not None and d is not None:
            return n[0] / d[0], f"{n[1]}/{d[1]}"
        return Decimal(1), u
    w = _word(u)
    if w is not None:
        return w
    return Decimal(1), u


def parse_value(text: str, unit: str = "") -> tuple[float | str | None, str]:
    """One ncu value (as printed in a CSV cell) in base units.

    Returns ``(value, base_unit)``: a float for numbers (thousands separators removed,
    ``nan``/``inf`` kept as float NaN/inf), ``None`` for ``n/a`` or an empty cell, and the
    text itself for enumerations such as ``CachePreferNone``.
    """
    factor, base = base_unit(unit)
    t = text.strip()
    if t == "" or t.lower() == "n/a":
        return None, base
    low = t.lower()
    if low in ("nan", "-nan", "+nan"):
        return math.nan, base
    if low in ("inf", "+inf", "-inf", "infinity", "-infinity"):
        return (-math.inf if low.startswith("-") else math.inf), base
    plain = t.replace(",", "")
    if _NUMBER.fullmatch(plain):
        try:
            return float(Decimal(plain) * factor), base
        except InvalidOperation:  # pragma: no cover - the regex admits only numbers
            return t, unit
    return t, unit


def is_missing(value) -> bool:
    """True for a value ncu could not measure: ``None`` (n/a) or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))
