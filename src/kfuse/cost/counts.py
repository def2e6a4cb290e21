"""What a compiled program moves and computes at given sizes, counted from its program, plan and
kernels (the benchmarks' bytes and flops; no model, no GPU).  Entries are ``ir/program.entries``'s,
the planner's: a csr matrix counts its three arrays (2 nnz + rows + 1), not rows x cols x nnz."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..errors import KfuseError
from ..ir.artifact import LaunchedKernel
from ..ir.program import Program, entries_of
from ..library import expr as library_expr


def traffic(program: Program, kernels: Sequence[LaunchedKernel], dtype: str, dims: Mapping[int, int]) -> int:
    """Bytes a plan's ``kernels`` move through global memory: per kernel, each array it loads or
    stores once (re-reads of small invariant subvectors by several blocks are not counted)."""
    n = entries_of(program, dims)
    total = 0
    for k in kernels:
        moved = {a.value.id for a in k.launch.args if a.kind == "array" and a.value is not None}
        total += sum(n[v] for v in moved)
    return total * np.dtype(dtype).itemsize


def compulsory_traffic(program: Program, dtype: str, dims: Mapping[int, int]) -> int:
    """Bytes if every input were read once and every output written once."""
    n = entries_of(program, dims)
    vals = [v for v in program.inputs if v.type != "scalar"] + list(program.outputs)
    return sum(n[v.id] for v in vals) * np.dtype(dtype).itemsize


def flops(program: Program, dims: Mapping[int, int]) -> int:
    """Floating-point operations of the program, from the library's per-function counts."""
    n = entries_of(program, dims)
    total = 0
    for c in program.calls:
        if c.function.flops is None:
            raise KfuseError(f"{c.function.name} ({c.function.file}) declares no flops count")
        scope = {p: (n[v.id] if hasattr(v, "id") else 1) for p, v in c.bindings().items()}
        total += int(library_expr.evaluate(c.function.flops, scope, "flops"))   # checked, never eval
    return total


__all__ = ["traffic", "compulsory_traffic", "flops"]
