"""Human-readable durations and byte counts for terminal and HTML output (the data stays in ns and bytes)."""


def fmt_ns(ns) -> str:
    """Format a duration in ns with a unit that keeps 3-4 significant digits."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.3f} {unit}" if abs(ns) < 10 * scale else f"{ns / scale:,.1f} {unit}"
    return f"{ns:,.0f} ns"


def fmt_pct(pct) -> str:
    return "-" if pct is None else f"{pct:.2f}%"


def fmt_bytes(n) -> str:
    """Format a byte count in GiB, MiB or bytes (binary units)."""
    if n is None:
        return "-"
    if abs(n) >= 2**30:
        return f"{n / 2**30:,.2f} GiB"
    if abs(n) >= 2**20:
        return f"{n / 2**20:,.1f} MiB"
    return f"{n:,} B"
