"""Sparse (CSR) mat-vec and CG per iteration, kfuse beside its peers, in one run (GPU).

    PYTHONPATH=src python benchmarks/sparse.py results.md            # the whole table
    PYTHONPATH=src python benchmarks/sparse.py --quick results.md    # fewer cases and repetitions

Mat-vec alone on ~10^6-row matrices with mean row lengths ~4, ~16, ~64 (columns in a band around
the diagonal, as a mesh matrix's) and a skewed one (row lengths 1-40 and a few rows of 10^5
entries), float32 and float64: kfuse's spmv, cuSPARSE through CuPy (``A @ x``), torch.sparse CSR
eager and under torch.compile, and the traffic limit (values + column indices + row pointers + x +
y over the copy bandwidth measured in the same run).  Each mat-vec is timed as one call between two
events (what a caller waits for, host work included) and as 20 calls in a row (per call: the GPU's
time, where the host keeps ahead).  CG per iteration on the 2-D 5-point
Laplacian of a 1000 x 1000 grid (10^6 rows): kfuse's step (examples/solvers/sparse_cg.py's
iteration in a ``kfuse.fori_loop``, the matrix in the loop's state), CuPy's cupyx.scipy.sparse.linalg.cg (cuSPARSE), torch eager and
torch.compile loops.  Times are medians of CUDA-event timings; every result is checked against a
float64 product (relative error per row, by |A| |x|).  Each peer runs in a try block: a failure
is a "-" with its reason.
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "solvers"))


def timed(fn, reps: int, warm: int = 3, calls: int = 1) -> float:
    """Median microseconds per call of ``calls`` calls of ``fn`` in a row between two CUDA events,
    over ``reps`` timings."""
    import cupy as cp
    for _ in range(warm):
        fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / calls)
    return statistics.median(out)


def copy_bandwidth(reps: int) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write)."""
    import cupy as cp
    a = cp.ones(2**27, cp.float64)
    b = cp.empty_like(a)
    us = timed(lambda: b.__setitem__(slice(None), a), reps)
    return 2 * a.nbytes / (us * 1e-6)


def banded(m: int, mean: int, seed: int):
    """(indptr, indices) int32 of an m x m pattern: row lengths mean +- mean/2, columns within
    +-2048 of the diagonal (sorted within rows)."""
    import cupy as cp
    rng = cp.random.default_rng(seed)
    lengths = rng.integers(max(1, mean // 2), mean + mean // 2 + 1, m)
    return _pattern(lengths, m, 2048, rng)


def skewed(m: int, seed: int):
    import cupy as cp
    rng = cp.random.default_rng(seed)
    lengths = rng.integers(1, 41, m)
    long_rows = np.random.default_rng(seed).choice(m, 4, replace=False)     # CuPy's Generator has no choice
    lengths[cp.asarray(long_rows)] = 100_000
    return _pattern(lengths, m, m, rng)


def _pattern(lengths, m, width, rng):
    import cupy as cp
    indptr = cp.zeros(m + 1, cp.int64)
    cp.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    rows = cp.searchsorted(indptr[1:], cp.arange(nnz), side="right")     # the row of each entry
    cols = cp.clip(rows + rng.integers(-width, width + 1, nnz), 0, m - 1)
    order = cp.lexsort(cp.stack([cols, rows]))
    return indptr.astype(cp.int32), cols[order].astype(cp.int32)


def check(y, ref, mag) -> float:
    import cupy as cp
    return float(cp.max(cp.abs(y.astype(cp.float64) - ref) / cp.maximum(mag, 1e-300)))


def spmv_rows(name, indptr, indices, dtype, reps, bw, lines):
    import cupy as cp
    import cupyx.scipy.sparse as cps
    import kfuse
    m = indptr.shape[0] - 1
    nnz = indices.shape[0]
    data64 = cp.random.default_rng(1).standard_normal(nnz)
    x64 = cp.random.default_rng(2).standard_normal(m)
    data, x = data64.astype(dtype), x64.astype(dtype)
    A64 = cps.csr_matrix((data.astype(cp.float64), indices, indptr), shape=(m, m))
    ref = A64 @ x.astype(cp.float64)
    mag = abs(A64) @ cp.abs(x.astype(cp.float64))
    item = np.dtype(dtype).itemsize
    traffic = nnz * (item + 4) + (m + 1) * 4 + 2 * m * item
    cells = {"limit": f"{traffic / bw * 1e6:.1f}"}
    tol = 1e-4 if dtype == "float32" else 1e-11

    def run(label, make):
        try:
            fn, out = make()
            us = timed(fn, reps)
            row = timed(fn, max(3, reps // 5), calls=20)
            err = check(out(), ref, mag)
            cells[label] = f"{us:.1f} / {row:.1f}" + ("" if err < tol else f" (err {err:.1e}!)")
        except Exception as e:  # noqa: BLE001 - a peer that cannot run: its reason in the table
            cells[label] = f"- ({type(e).__name__}: {str(e)[:60]})"

    def kf():
        prog = kfuse.compile("csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n", dtype=dtype)
        bound = prog.bind(A=kfuse.CSR(indptr, indices, data, (m, m)), x=x)
        return bound, lambda: bound.result

    def cusparse():
        A = cps.csr_matrix((data, indices, indptr), shape=(m, m))
        box = [A @ x]
        return (lambda: box.__setitem__(0, A @ x)), lambda: box[0]

    def torch_csr(compiled: bool):
        import torch
        A = torch.sparse_csr_tensor(torch.as_tensor(indptr, device="cuda"), torch.as_tensor(indices, device="cuda"),
                                    torch.as_tensor(data, device="cuda"), size=(m, m))
        xt = torch.as_tensor(x, device="cuda")
        f = torch.compile(lambda A, v: A @ v) if compiled else (lambda A, v: A @ v)
        box = [f(A, xt)]
        return (lambda: box.__setitem__(0, f(A, xt))), lambda: cp.asarray(box[0])

    run("kfuse", kf)
    run("cuSPARSE", cusparse)
    run("torch", lambda: torch_csr(False))
    run("torch.compile", lambda: torch_csr(True))
    mean = nnz / m
    lines.append(f"| {name} | {dtype} | {m} | {mean:.1f} | " + " | ".join(
        cells.get(k, "-") for k in ("kfuse", "cuSPARSE", "torch", "torch.compile", "limit")) + " |")


def laplacian_2d(k: int):
    import cupyx.scipy.sparse as cps
    d = cps.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(k, k), format="csr")
    off = cps.diags([-1.0, -1.0], [-1, 1], shape=(k, k), format="csr")
    eye = cps.identity(k, format="csr")
    return (cps.kron(eye, d) + cps.kron(off, eye)).tocsr()


def cg_rows(dtype, iters, reps, lines):
    import cupy as cp
    import cupyx.scipy.sparse.linalg as cpla
    import sparse_cg
    import kfuse
    A = laplacian_2d(1000).astype(dtype)
    A.indices = A.indices.astype(cp.int32)
    A.indptr = A.indptr.astype(cp.int32)
    m = A.shape[0]
    b = cp.random.default_rng(3).standard_normal(m).astype(dtype)
    cells = {}

    def per_iteration(fn) -> str:
        try:
            return f"{timed(fn, reps, warm=1) / iters:.1f}"
        except Exception as e:  # noqa: BLE001
            return f"- ({type(e).__name__}: {str(e)[:60]})"

    r0, rr0, _ = sparse_cg._start(A, b, b * 0)

    def kf():               # the example's iteration in a device loop, the matrix in the state
        s = kfuse.fori_loop(0, iters, lambda i, s: (s[0],) + sparse_cg.cg_update(*s), (A, b * 0, r0, r0, rr0))
        return s[1]

    cells["kfuse"] = per_iteration(kf)
    kw = {"rtol" if "rtol" in inspect.signature(cpla.cg).parameters else "tol": 0.0}   # CuPy 14 names it rtol
    cells["CuPy cg"] = per_iteration(lambda: cpla.cg(A, b, maxiter=iters, **kw))

    def torch_loop(compiled: bool):
        import torch
        At = torch.sparse_csr_tensor(torch.as_tensor(A.indptr), torch.as_tensor(A.indices), torch.as_tensor(A.data),
                                     size=A.shape)
        bt = torch.as_tensor(b)

        def it(x, r, p, rr):
            q = At @ p
            alpha = rr / (p @ q)
            x = x + alpha * p
            r = r - alpha * q
            rr1 = r @ r
            return x, r, r + (rr1 / rr) * p, rr1

        f = torch.compile(it) if compiled else it

        def run():
            x, r = bt * 0, bt.clone()
            p, rr = r, r @ r
            for _ in range(iters):
                x, r, p, rr = f(x, r, p, rr)
        return run

    for label, compiled in (("torch", False), ("torch.compile", True)):
        try:
            cells[label] = per_iteration(torch_loop(compiled))
        except Exception as e:  # noqa: BLE001
            cells[label] = f"- ({type(e).__name__}: {str(e)[:60]})"
    lines.append(f"| 2-D Laplacian 1000^2 | {dtype} | {m} | " + " | ".join(
        cells.get(k, "-") for k in ("kfuse", "CuPy cg", "torch", "torch.compile")) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="markdown file to write")
    ap.add_argument("--quick", action="store_true", help="fewer cases and repetitions")
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    import cupy as cp
    reps = 10 if args.quick else 50
    dtypes = ["float64"] if args.quick else ["float32", "float64"]
    m = args.rows
    bw = copy_bandwidth(reps)
    lines = [f"# Sparse mat-vec and CG ({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()})", "",
             f"Copy bandwidth {bw / 1e9:.0f} GB/s. Times in microseconds (medians); mat-vec: one call / "
             "per call of 20 in a row.", "",
             "## CSR mat-vec", "",
             "| matrix | dtype | rows | nnz/row | kfuse | cuSPARSE (CuPy) | torch | torch.compile | traffic limit |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    cases = [("band ~4", lambda: banded(m, 4, 0)), ("band ~16", lambda: banded(m, 16, 1)),
             ("band ~64", lambda: banded(m, 64, 2)), ("skewed", lambda: skewed(m, 3))]
    for name, make in cases:
        try:
            indptr, indices = make()
        except Exception as e:  # noqa: BLE001
            lines.append(f"| {name} | - | - | - | - ({type(e).__name__}: {e}) | | | | |")
            continue
        for dtype in dtypes:
            try:
                spmv_rows(name, indptr, indices, dtype, reps, bw, lines)
            except Exception:  # noqa: BLE001
                lines.append(f"| {name} | {dtype} | - | - | - ({traceback.format_exc(limit=1).splitlines()[-1][:80]}) | | | | |")
    lines += ["", "## CG per iteration", "", "| matrix | dtype | rows | kfuse | CuPy cg | torch | torch.compile |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for dtype in dtypes:
        try:
            cg_rows(dtype, 20 if args.quick else 100, 3 if args.quick else 7, lines)
        except Exception:  # noqa: BLE001
            lines.append(f"| 2-D Laplacian | {dtype} | - | - ({traceback.format_exc(limit=1).splitlines()[-1][:80]}) | | | |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
