"""What a compiled program moves and computes at given sizes, counted from its program, plan and
kernels (the benchmarks' bytes and flops; no model, no GPU)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..errors import KfuseError
from ..ir.artifact import LaunchedKernel
from ..ir.program import Program
from ..library import expr as library_expr


def entries(program: Program, dims: Mapping[int, int]) -> dict[int, int]:
    """Value id -> number of entries, for dimension sizes ``dims`` (dimension id -> size)."""
    out = {}
    for v in program.values:
        n = 1
        for d in v.dims:
            n *= dims[d]
        out[v.id] = n
    return out


def traffic(program: Program, kernels: Sequence[LaunchedKernel], dtype: str, dims: Mapping[int, int]) -> int:
    """Bytes a plan's ``kernels`` move through global memory: per kernel, each array it loads or
    stores once (re-reads of small invariant subvectors by several blocks are not counted)."""
    n = entries(program, dims)
    total = 0
    for k in kernels:
        moved = {a.value.id for a in k.launch.args if a.kind == "array" and a.value is not None}
        total += sum(n[v] for v in moved)
    return total * np.dtype(dtype).itemsize


def compulsory_traffic(program: Program, dtype: str, dims: Mapping[int, int]) -> int:
    """Bytes if every input were read once and every output written once."""
    n = entries(program, dims)
    vals = [v for v in program.inputs if v.type != "scalar"] + list(program.outputs)
    return sum(n[v.id] for v in vals) * np.dtype(dtype).itemsize


def flops(program: Program, dims: Mapping[int, int]) -> int:
    """Floating-point operations of the program, from the library's per-function counts."""
    n = entries(program, dims)
    total = 0
    for c in program.calls:
        if c.function.flops is None:
            raise KfuseError(f"{c.function.name} ({c.function.file}) declares no flops count")
        scope = {p: (n[v.id] if hasattr(v, "id") else 1) for p, v in c.bindings().items()}
        total += int(library_expr.evaluate(c.function.flops, scope, "flops"))   # checked, never eval
    return total


__all__ = ["entries", "traffic", "compulsory_traffic", "flops"]
