"""Tie-breaks among implementations the model predicts alike (``rank.Ranker.rank``): choices that
measured best where the calibration sees no difference (docs/design.md, 'Tie-breaks')."""
from __future__ import annotations

from ..codegen.kernel import KernelCode
from ..ir.kernel import REGISTERS_PER_SM
from ..library.mappings import MAPPINGS
from .space import Implementation

DEFAULT_BY = 8          # preferred threads in y for nested functions (when the variant allows it)


def _load_width(code: KernelCode) -> int:
    """Entries each thread moves per load routine (the narrowest load of the kernel)."""
    widths = [code.placement.registers.get(a.element, 1) for s in code.steps
              if s.routine is not None and s.routine.kind == "load" for a in s.accesses]
    return min(widths, default=1)


def _tile_access_width(code: KernelCode) -> int:
    """Consecutive entries per access of the kernel's narrowest tile load (4: 16-byte accesses)."""
    widths = [MAPPINGS[a.mapping].width for s in code.steps
              if s.routine is not None and s.routine.kind == "load" for a in s.accesses
              if MAPPINGS[a.mapping].kind == "tile"]
    return min(widths, default=1)


def _strip_residents(code: KernelCode, itemsize: int) -> int:
    """A strip kernel's resident threads per SM (one wave, by its estimated registers): of strips
    that the model prices alike (the same bytes), the one with more threads in flight per SM
    (docs/design.md, 'Tie-breaks'); 0 for other kernels."""
    L = code.launch
    if not L.whole_entries:
        return 0
    return L.threads * max(1, REGISTERS_PER_SM // (L.threads * L.strip_registers(itemsize)))


def preference(impl: Implementation, code: KernelCode, itemsize: int = 4) -> tuple:
    """Tie-break among equally predicted implementations (docs/design.md, 'Tie-breaks'): the smallest
    thread-block cluster (clusters of 4 and 8 blocks are held fewer at once, their row sums cross
    more blocks), fewer barriers, less shared memory, then the choices that measured best: for
    unnested kernels the widest accesses (16-byte quad variants), 4 unrolled
    iterations and 32 instances per block; for nested ones 16-byte tile accesses, 4 unrolled
    iterations, BY = 8 and the smallest span."""
    if code.spec.nesting == 2:
        return (code.launch.cluster, -_strip_residents(code, itemsize), code.barriers, code.launch.smem_bytes_per_real,
                -_tile_access_width(code), abs(impl.unroll - 4),
                abs((impl.by or DEFAULT_BY) - DEFAULT_BY), impl.span, sum(impl.variants), impl.order)
    return (code.barriers, code.launch.smem_bytes_per_real, -_load_width(code), abs(impl.unroll - 4),
            abs(impl.ipb - 32), sum(impl.variants), impl.order)


def sorted_lazily(items: list, keys: list) -> list:
    """``sorted(items, key=lambda t: tuple(k(t) for k in keys))``, each key after the first found
    only for the items the keys before it tie (sorts are stable: the same order)."""
    keyed = sorted(((keys[0](t), t) for t in items), key=lambda kt: kt[0])
    out = [t for _, t in keyed]
    if len(keys) == 1:
        return out
    n = 0
    while n < len(keyed):
        m = n + 1
        while m < len(keyed) and keyed[m][0] == keyed[n][0]:
            m += 1
        if m - n > 1:
            out[n:m] = sorted_lazily(out[n:m], keys[1:])
        n = m
    return out
