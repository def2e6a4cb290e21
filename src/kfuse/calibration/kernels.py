"""Kernel factors (GPU): the calibration's ``kernels``, for the functions no micro-kernel stands for.

A sparse mat-vec's routines cost what the matrix's row lengths and the gather's locality make
them cost, and a stencil's compute reads a grid whose extents a micro-kernel does not have
(``probes.library_probes`` leaves both out).  Such a function is timed whole instead: the
program of one call of it (``script``), compiled like any script, run on inputs of the sizes below,
each time set against the transfer model's price of its operands' bytes at the copy bandwidth.
Its *factor* at a size is

    factor = (measured time - launch overhead) / (operand bytes / transfer model bandwidth)

and the calibrated model prices a kernel holding the call as the transfer model does, the call's
operand bytes at ``factor`` times their time (``CalibratedModel._factored_time``).  A sparse
mat-vec is timed at several mean row lengths (``MEANS``: rows of lengths mean/2 to 3 mean/2,
columns within 2048 of the diagonal, as a mesh's), a stencil on one large grid of its rank
(``GRIDS``).  The variant measured is the one the planner picks for the call alone (one per
function in the shipped library); the factor is kept by function and variant with the digest of
the variant's source files, so a later calibration of a changed library reuses the factors of
functions whose code did not change.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..cost.store import kernel_factor_key, source_digest
from ..cost.transfer import DEFAULT_MACHINE
from ..library.schema import Function, Library

MEANS = {False: (2, 4, 8, 16, 32, 64, 128), True: (4, 16, 64)}
ROWS = {False: 2**20, True: 2**18}
GRIDS = {False: {2: (4096, 4096), 3: (256, 256, 256)}, True: {2: (2048, 2048), 3: (128, 128, 128)}}
BAND = 2048                 # columns within this distance of the diagonal
REPS = {False: 30, True: 10}


def targets(lib: Library) -> list[Function]:
    """The functions timed whole: those reading a csr matrix and the stencils (``grid``), whose
    inputs a one-call script can declare (csr, vector and scalar parameters)."""
    out = []
    for fn in lib.functions:
        if not (fn.grid or any(p.type == "csr" for p in fn.params)):
            continue
        if all(p.type in ("csr", "vector", "scalar") for p in fn.params):
            out.append(fn)
    return out


def script(fn: Function) -> str:
    """The program of one call of ``fn``, its inputs by their parameters' names."""
    lines = [f"{p.type} {p.name};" for p in fn.params]
    ins = ", ".join(p.name for p in fn.inputs)
    outs = ", ".join(p.name for p in fn.outputs)
    return "\n".join(lines + [f"input {ins};", f"{outs} = {fn.name}({ins});", f"return {outs};", ""])


def factor(measured_us: float, launch_us: float, moved_bytes: int) -> float:
    """The kernel factor of a measurement (see the module docstring), at least a hundredth."""
    ideal_us = moved_bytes / DEFAULT_MACHINE.bandwidth * 1e6
    return max(0.01, (measured_us - launch_us) / ideal_us)


def band_pattern(rows: int, mean: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices), int32, of a rows x rows pattern: row lengths mean/2 to 3 mean/2 (at least
    1), columns within ``BAND`` of the diagonal, sorted within rows, no duplicates (NumPy)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(1, mean // 2), max(1, mean // 2) + mean + 1, rows)
    lengths = np.minimum(lengths, min(rows, 2 * BAND + 1))
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    row = np.repeat(np.arange(rows), lengths)
    start = np.clip(row - BAND, 0, None)
    width = np.minimum(row + BAND, rows - 1) - start + 1
    # distinct columns: the k-th entry of a row takes an evenly spread offset, jittered within its gap
    k = np.arange(indptr[-1]) - np.repeat(indptr[:-1], lengths)
    gap = width / np.repeat(lengths, lengths)
    cols = start + np.floor(k * gap + rng.random(indptr[-1]) * np.maximum(gap - 1, 0)).astype(np.int64)
    return indptr.astype(np.int32), np.minimum(cols, rows - 1).astype(np.int32)


def inputs(fn: Function, size, dtype: str, cp, seed: int = 0) -> tuple[dict, int]:
    """(the call's inputs on the GPU, operand bytes moved: its inputs' and outputs' entries) at a
    size: a mean row length for a csr function (``ROWS`` rows, quick or not as ``size[1]``), a
    grid shape for a stencil."""
    import kfuse
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    out: dict[str, Any] = {}
    entries = 0
    if fn.grid:
        shape = size
        n = math.prod(shape)
        for p in fn.inputs:
            if p.type == "scalar":
                out[p.name] = 1.0
            else:
                out[p.name] = cp.asarray(rng.standard_normal(shape).astype(dt))
                entries += n
        entries += n * len(fn.outputs)
        return out, entries * dt.itemsize
    mean, rows = size
    indptr, indices = band_pattern(rows, mean, seed)
    nnz = int(indptr[-1])
    for p in fn.inputs:
        if p.type == "csr":
            data = rng.standard_normal(nnz).astype(dt)
            out[p.name] = kfuse.CSR(cp.asarray(indptr), cp.asarray(indices), cp.asarray(data), (rows, rows))
            entries += 2 * nnz + rows + 1
        elif p.type == "vector":
            out[p.name] = cp.asarray(rng.standard_normal(rows).astype(dt))
            entries += rows
        else:
            out[p.name] = 1.0
    entries += rows * len(fn.outputs)
    return out, entries * dt.itemsize


def measure(lib: Library, dtype: str, quick: bool, launch_us: float, known: dict[str, dict],
            log: Callable[[str], None]) -> dict[str, dict]:
    """Kernel factors of every ``targets`` function (kernel_factor_key -> {"by", "source",
    "points"}); a factor in ``known`` whose source digest is the variant's is taken as it is."""
    import kfuse
    from ..runtime.gpu import cupy
    from ..runtime.timing import median_us
    cp = cupy()
    found: dict[str, dict] = {}
    for fn in targets(lib):
        prog = kfuse.compile(script(fn), library=lib, dtype=dtype, fuse=False, tuned=False, calibration=False)
        var = next(kc.variant for k in prog.kernels for kc in k.spec.calls if kc.call.function.name == fn.name)
        key, digest = kernel_factor_key(fn, var), source_digest(lib, var)
        if key in known and known[key]["source"] == digest:
            found[key] = known[key]
            continue
        sizes = ([GRIDS[quick][fn.grid]] if fn.grid else [(m, ROWS[quick]) for m in MEANS[quick]])
        points = []
        for size in sizes:
            args, moved = inputs(fn, size, dtype, cp)
            us = median_us(lambda: prog(**args), reps=REPS[quick], warmup=3)
            x = float(math.prod(size)) if fn.grid else float(size[0])
            points.append([x, round(factor(us, launch_us, moved), 4)])
            log(f"  {key} at {'x'.join(map(str, size)) if fn.grid else f'mean row {size[0]}'}: {us:.1f} us, "
                f"factor {points[-1][1]:.3f}")
            del args
        found[key] = {"by": "entries" if fn.grid else "mean_row", "source": digest, "points": points}
    return found


__all__ = ["MEANS", "ROWS", "GRIDS", "targets", "script", "factor", "band_pattern", "inputs", "measure"]
