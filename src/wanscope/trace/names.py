"""One spelling of a kernel name whichever tool demangled it (``kernels.name_norm``).

torch.profiler (Kineto) and Nsight Systems spell one templated kernel differently: Kineto
writes ``elementwise_kernel<128, 2, ...>``, ``(anonymous namespace)``, ``{lambda()#1}``,
``float const*``, ``false`` and the function's parameter types; nsys writes
``elementwise_kernel<(int)128, (int)2, void ...>``, ``<unnamed>``, ``[lambda() (instance 1)]``,
``const float *``, ``(bool)0`` and template placeholders (``T1 const&``) for the parameters.
The normal form takes Kineto's spelling and drops every function parameter list (not a
lambda's) and return type: on the same H200 step captured by both tools
(``tests/data/h200_wan21_1p3b_triton_step1.*``) every one of the 38 kernel names pairs up.
``kernels.name`` keeps the name as recorded.
"""

from __future__ import annotations

import re

_NSYS_LAMBDA = re.compile(r"\[lambda\(([^()]*)\) \(instance (\d+)\)\]")
_CALL = "operator\x00"  # operator() while parameter lists are dropped
_CASTS = (
    (re.compile(r"\(bool\)0"), "false"),
    (re.compile(r"\(bool\)1"), "true"),
    (re.compile(r"\(unsigned int\)(\d+)"), r"\1u"),
    (re.compile(r"\(unsigned long\)(\d+)"), r"\1ul"),
    (re.compile(r"\((?:int|long|short|char|signed char)\)(-?\d+)"), r"\1"),
)
_CONST_FIRST = re.compile(r"\bconst (\w[\w:]*)")
_POINTER_SPACE = re.compile(r"\s*([*&])")
_ENABLE_IF = re.compile(r"^std::enable_if<[^>]*>::type ")
_VOID = re.compile(r"(^|[<, ])void ")


def _drop_parameter_lists(name: str) -> str:
    """``name`` without each parenthesized group that follows a name or a ``>`` (a function's
    parameter list), except a lambda's."""
    out: list[str] = []
    i = 0
    while i < len(name):
        c = name[i]
        prev = out[-1] if out else ""
        if c == "(" and (prev.isalnum() or prev in "_>") and not "".join(out[-6:]) == "lambda":
            depth = 0
            while i < len(name):
                depth += name[i] == "("
                depth -= name[i] == ")"
                i += 1
                if depth == 0:
                    break
            continue
        out.append(c)
        i += 1
    return "".join(out)


def normalize_kernel_name(name: str) -> str:
    """The normal form of a demangled kernel name (module docstring); a name without
    templates or parameters (``nvjet_sm90_tst_...``, ``triton_poi_fused_...``) is itself."""
    n = _NSYS_LAMBDA.sub(r"{lambda(\1)#\2}", name)
    n = n.replace("<unnamed>", "(anonymous namespace)").replace("operator ()", "operator()")
    n = n.replace("operator()", _CALL)
    for pattern, repl in _CASTS:
        n = pattern.sub(repl, n)
    n = _drop_parameter_lists(n).replace(_CALL, "operator()")
    n = _POINTER_SPACE.sub(r"\1", _CONST_FIRST.sub(r"\1 const", n))
    n = _VOID.sub(r"\1", _ENABLE_IF.sub("", n))
    while "> >" in n:
        n = n.replace("> >", ">>")
    return n.strip()


def fill_name_norm(con) -> None:
    """Set ``kernels.name_norm`` of every row without one, per distinct name."""
    names = [r[0] for r in con.execute("SELECT DISTINCT name FROM kernels WHERE name_norm IS NULL").fetchall()]
    if not names:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE _name_norm (name VARCHAR, name_norm VARCHAR)")
    con.executemany("INSERT INTO _name_norm VALUES (?, ?)", [(n, normalize_kernel_name(n)) for n in names])
    con.execute(
        "UPDATE kernels SET name_norm = m.name_norm FROM _name_norm m WHERE kernels.name = m.name AND kernels.name_norm IS NULL"
    )
    con.execute("DROP TABLE _name_norm")
