"""Float64 NumPy evaluation of a program, from each library function's ``reference`` expression.

``magnitude=True`` evaluates the program on the absolute values of every input and scalar
argument: for sums of products (all of BLAS) that gives the magnitude of the terms each result
is made of, the scale against which rounding error is measured.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import KfuseError
from .ir.program import Program, ScalarArg
from .library import expr as library_expr


def evaluate(program: Program, inputs: dict, magnitude: bool = False) -> dict[int, Any]:
    """Value id -> float64 result for every value of the program.  A vector input given as a 2-D
    or 3-D array is a grid (runtime/grids.py): vectors are kept flat, and a stencil's reference
    gets the vectors of that size in the grid's shape."""
    env: dict[int, Any] = {}                 # arrays; floats for scalar inputs
    grids: dict[int, tuple[int, ...]] = {}   # dimension id -> grid shape
    for v in program.inputs:
        x = inputs[v.name]
        x = float(x) if v.type == "scalar" else np.asarray(x, dtype=np.float64)
        if v.type == "vector" and np.ndim(x) in (2, 3):
            grids.setdefault(v.dims[0], np.shape(x))
            x = np.ravel(x)
        env[v.id] = np.abs(x) if magnitude else x
    for c in program.calls:
        fn = c.function
        if fn.reference is None:
            raise KfuseError(f"{fn.name} ({fn.file}) has no reference expression to check against")
        scope: dict[str, object] = {}
        for p, a in zip(fn.inputs, c.args):
            if isinstance(a, ScalarArg):
                scope[p.name] = a.evaluate(lambda v: env[v.id], magnitude)   # inputs already absolute
            elif fn.grid and a.type == "vector" and a.dims[0] in grids:
                scope[p.name] = env[a.id].reshape(grids[a.dims[0]])
            else:
                scope[p.name] = env[a.id]
        result = library_expr.evaluate(fn.reference, scope, fn.reference_kind)   # checked, never eval
        results = result if len(fn.outputs) > 1 else (result,)
        for v, r in zip(c.outputs, results):
            env[v.id] = np.asarray(r, dtype=np.float64)
            if v.type == "vector":
                env[v.id] = np.ravel(env[v.id])
    return env


def returned(program: Program, env: dict[int, Any], magnitude: bool = False) -> list[Any]:
    """What a call returns, in the return statement's order, from ``evaluate``'s results: the
    returned values, and the returned scalar arithmetic evaluated in float64."""
    return [r.evaluate(lambda v: float(env[v.id]), magnitude) if isinstance(r, ScalarArg) else env[r.id]
            for r in program.returned]


def random_inputs(program: Program, dims: dict[int, int], seed: int | None = None) -> dict[str, object]:
    """Fresh standard-normal inputs (never zeros) for every input of the program, as NumPy."""
    rng = np.random.default_rng(seed)
    out: dict[str, object] = {}
    for v in program.inputs:
        if v.type == "scalar":
            out[v.name] = float(rng.uniform(0.5, 2.0) * rng.choice([-1.0, 1.0]))
        else:
            out[v.name] = rng.standard_normal(tuple(dims[d] for d in v.dims))
    return out


def relative_error(got, ref: np.ndarray, scale: np.ndarray) -> float:
    """||got - ref|| / ||scale||; NaN anywhere (an unwritten element) gives inf.  A grid-shaped
    result is compared with its flat reference entry by entry."""
    got = np.asarray(got, dtype=np.float64)
    if got.ndim in (2, 3) and np.ndim(ref) == 1 and got.size == np.size(ref):
        got = got.ravel()
    if got.shape != ref.shape:
        raise KfuseError(f"result shape {got.shape} differs from the reference {ref.shape}")
    if not np.all(np.isfinite(got)):
        return float("inf")
    denom = float(np.linalg.norm(scale))
    return float(np.linalg.norm(got - ref)) / (denom if denom > 0 else 1.0)


def device_case(program: Program, dims: dict[int, int], dtype: str, seed: int | None = None):
    """Fresh random inputs for a GPU check: (device inputs, the same values rounded to ``dtype``
    as float64 NumPy for the reference, NaN-poisoned output arrays by name)."""
    from .runtime.gpu import cupy
    cp = cupy()
    dt = np.dtype(dtype)
    host = random_inputs(program, dims, seed)
    dev = {k: (cp.asarray(v, dtype=dt) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
    rounded = {k: (v.astype(dt).astype(np.float64) if isinstance(v, np.ndarray) else float(dt.type(v)))
               for k, v in host.items()}
    poisoned = {v.name: cp.full(tuple(dims[d] for d in v.dims), np.nan, dtype=dt) for v in program.outputs}
    return dev, rounded, poisoned
