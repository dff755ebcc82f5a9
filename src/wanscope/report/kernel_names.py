"""Readable kernel names: a short form that keeps what tells two kernels apart.

A CUDA kernel's demangled name runs to hundreds of characters of namespaces, template
arguments and argument lists (``void at::native::elementwise_kernel<128, 4,
at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, ...,
at::native::binary_internal::MulFunctor<float> > >(...)::{lambda(int)#1}>(int, ...)``); a
prefix of it reads the same for every elementwise kernel. The short form is the kernel's own
name with its leading numeric template arguments (``elementwise_kernel<128, 4>``), then the
identifiers inside it that name what it computes (the functor ``MulFunctor``, the copy
``direct_copy_kernel_cuda``), namespaces and plumbing (``gpu_kernel_impl``, lambdas,
``TensorIteratorBase``, offset calculators) left out, then the element types. Where two
kernels' short forms meet, both get more of their identifiers, then their full names.
"""

from __future__ import annotations

import re

from wanscope.report.tables import clean

MAX_PLAIN = 72
MAX_WORDS = 8  # identifiers a short form takes at most (more reads as the full name)
MAX_TYPES = 4
_IDENT = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")  # a name with its namespaces: the last part counts
_TYPES = frozenset(
    "BFloat16 Half float double int char bool long short unsigned signed int8_t uint8_t int16_t "
    "int32_t int64_t uint32_t uint64_t Float8_e4m3fn Float8_e5m2 complex __half __nv_bfloat16 true false".split()
)
# Namespaces, keywords and the launch plumbing every elementwise or reduction kernel shares.
_PLUMBING = frozenset(
    "void at native c10 std cuda detail cub cutlass anonymous namespace lambda operator const "
    "TensorIteratorBase TensorIterator array Array OffsetCalculator TrivialOffsetCalculator "
    "LoadWithoutCast StoreWithoutCast LoadWithCast StoreWithCast function_traits memory policies "
    "instance gpu_kernel_impl gpu_kernel_impl_nocast gpu_kernel gpu_kernel_with_scalars opmath_gpu_kernel_with_scalars "
    "opmath_symmetric_gpu_kernel_with_scalars binary_internal launch_legacy_kernel "
    "launch_vectorized_kernel unrolled_elementwise_kernel_for_multi_outputs vectorized "
    "unroll elementwise ReduceOp func_wrapper_t MeanOps WelfordOps unsigned_int".split()
)


_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|char|short|bool)\)")
_NUMBER = re.compile(r"\b\d\w*")
_PLACEHOLDER = re.compile(r"T\d+$")  # template parameters as nvcc prints them: T1, T2, ...
_CLOSE = {"<": ">", "(": ")", "{": "}", "[": "]"}


def _template_end(s: str, i: int) -> int:
    """The index after the bracket that closes ``s[i]`` (any of ``<({[`` nested inside), or
    ``len(s)`` where it is never closed."""
    stack = []
    for j in range(i, len(s)):
        c = s[j]
        if c in _CLOSE:
            stack.append(_CLOSE[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
    return len(s)


def _own_name(name: str) -> tuple[str, str, str]:
    """(base, numeric template arguments, the template arguments' text) of a name (its leading
    ``void`` already removed), with ``(anonymous namespace)`` and casts such as ``(int)``
    removed; the kernel's argument list is dropped."""
    name = _CAST.sub("", name.replace("(anonymous namespace)::", ""))
    cut = len(name)
    for ch in "<(":
        i = name.find(ch)
        if 0 <= i < cut:
            cut = i
    base = name[:cut].rsplit("::", 1)[-1].strip()
    if cut == len(name) or name[cut] != "<":
        return base, "", ""
    template = name[cut : _template_end(name, cut)]
    m = re.match(r"<\s*((?:-?\d+[uUlL]*\s*,\s*)*-?\d+[uUlL]*)\s*[,>]", template)
    nums = "<" + ", ".join(p.strip() for p in m.group(1).split(",")) + ">" if m else ""
    return base, nums, _NUMBER.sub(" ", template)


def candidates(name: str) -> list[str]:
    """Ever longer readable forms of ``name`` (a kernel name as the trace has it), the last
    one the full name (``clean``, without a leading ``void``)."""
    full = clean(name).removeprefix("void ").strip()
    if "<" not in full and "::" not in full:  # not a C++ signature: "Memset (Device)", a Triton kernel
        if len(full) <= MAX_PLAIN:
            return [full]
        half = (MAX_PLAIN - 1) // 2
        return [full[:half] + "…" + full[-half:], full]
    base, nums, rest = _own_name(full)
    words, types = [], []
    for w in (q.rsplit("::", 1)[-1] for q in _IDENT.findall(rest)):
        if w == base or w in _PLUMBING or _PLACEHOLDER.match(w):
            continue
        bucket = types if w in _TYPES else words
        if w not in bucket:
            bucket.append(w)
    head = base + nums
    words, types = words[:MAX_WORDS], types[:MAX_TYPES]
    out = []
    for n in range(1, len(words) + 1):
        out.append(" · ".join(x for x in (head, " ".join(words[:n])) if x))
    if not out:
        out.append(head or full)
    last = out[-1]
    for n in range(1, len(types) + 1):
        out.append(f"{last} ({', '.join(types[:n])})")
    # Start at two identifiers where there are two: a functor under a wrapper reads better.
    start = min(1, len(out) - 1) if len(words) >= 2 else 0
    return [*out[start:], full] if out[-1] != full else out[start:]


def display_names(names) -> dict[str, str]:
    """A distinct readable name for every distinct name in ``names`` (kernel names): each
    starts at its shortest form; the names whose forms meet all move to their next form,
    until no two meet (the full names, ``clean``, at the latest). Names still the same then
    (they differ only in control characters, a leading ``void`` or surrounding whitespace) are
    told apart by `` [2]``, `` [3]``, ... in the order given, skipping labels already shown."""
    unique = list(dict.fromkeys(names))
    forms = {n: candidates(n) for n in unique}
    level = dict.fromkeys(unique, 0)
    while True:
        shown: dict[str, list[str]] = {}
        for n in unique:
            shown.setdefault(forms[n][level[n]], []).append(n)
        moved = False
        for group in shown.values():
            if len(group) < 2:
                continue
            for n in group:
                if level[n] < len(forms[n]) - 1:
                    level[n] += 1
                    moved = True
        if not moved:
            break
    out: dict[str, str] = {}
    taken: set[str] = set()
    for n in unique:
        label, k = forms[n][level[n]], 1
        while (shown_as := label if k == 1 else f"{label} [{k}]") in taken:
            k += 1
        taken.add(shown_as)
        out[n] = shown_as
    return out
