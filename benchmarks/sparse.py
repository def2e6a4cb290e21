"""Sparse (CSR) mat-vec and CG per iteration, kfuse beside its peers, in one run (GPU).

    PYTHONPATH=src python benchmarks/sparse.py results.md            # the whole table
    PYTHONPATH=src python benchmarks/sparse.py --quick results.md    # fewer cases and repetitions
    PYTHONPATH=src python benchmarks/sparse.py --set results.md      # on benchmarks/matrices.py's set
    PYTHONPATH=src python benchmarks/sparse.py --set --sweep-lanes results.md   # every row mapping forced

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

``--set``: the same two tables on benchmarks/matrices.py's set at ``--rows`` (meshes, a power-law
graph, a circuit, blocks, a band, a diagonal, random columns; ``--only`` picks some), each with
int32 and with int64 indices: the mat-vec on every matrix, CG on the symmetric positive definite
ones.  kfuse takes both index types (a kfuse.CSR of the arrays), torch too; CuPy's csr_matrix
keeps int32 indices only (it would cast int64 ones), so its int64 cells say so instead of timing
an int32 matrix.  A table of the matrices' row-length profiles comes first.
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
sys.path.insert(0, str(ROOT / "benchmarks"))      # matrices.py (--set); there already when run as a script


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


def spmv_rows(name, indptr, indices, dtype, reps, bw, lines, data64=None):
    """A row of the mat-vec table: the m x m matrix (indptr, indices) (int32 or int64, CuPy) with
    values ``data64`` (float64, CuPy; random normal where None) in ``dtype``, times a random x.
    The reference is CuPy's float64 product (its csr_matrix casts the indices to int32: right while
    nnz < 2^31)."""
    import cupy as cp
    import cupyx.scipy.sparse as cps
    import kfuse
    m = indptr.shape[0] - 1
    nnz = indices.shape[0]
    if data64 is None:
        data64 = cp.random.default_rng(1).standard_normal(nnz)
    x64 = cp.random.default_rng(2).standard_normal(m)
    data, x = data64.astype(dtype), x64.astype(dtype)
    A64 = cps.csr_matrix((data.astype(cp.float64), indices, indptr), shape=(m, m))
    ref = A64 @ x.astype(cp.float64)
    mag = abs(A64) @ cp.abs(x.astype(cp.float64))
    item = np.dtype(dtype).itemsize
    index = np.dtype(indices.dtype).itemsize
    traffic = nnz * (item + index) + (m + 1) * index + 2 * m * item
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
        refuse_cast(A, indices)
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


def refuse_cast(A, indices) -> None:
    """Raise where CuPy's csr_matrix ``A`` holds other indices than ``indices``' type: it casts
    int64 ones to int32, so timing it would time an int32 matrix under an int64 label."""
    if A.indices.dtype != indices.dtype:
        raise TypeError(f"CuPy's csr_matrix takes int32 indices only (refuses {indices.dtype})")


def laplacian_2d(k: int):
    import cupyx.scipy.sparse as cps
    d = cps.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(k, k), format="csr")
    off = cps.diags([-1.0, -1.0], [-1, 1], shape=(k, k), format="csr")
    eye = cps.identity(k, format="csr")
    return (cps.kron(eye, d) + cps.kron(off, eye)).tocsr()


def cg_rows(dtype, iters, reps, lines, name="2-D Laplacian 1000^2", csr=None):
    """A row of the CG table: time per iteration of ``iters`` CG iterations on ``csr`` (indptr,
    indices, float64 values, rows: CuPy arrays, int32 or int64 indices; a symmetric positive
    definite matrix) in ``dtype``, or on the 2-D Laplacian of a 1000 x 1000 grid where None.
    kfuse gets the Laplacian as a cupyx csr_matrix, a given matrix as a kfuse.CSR (either index
    type); CuPy's cg is timed only on int32 indices (``refuse_cast``) and divided by the steps it
    took (it stops early where the residual reaches 0)."""
    import cupy as cp
    import cupyx.scipy.sparse as cps
    import cupyx.scipy.sparse.linalg as cpla
    import sparse_cg
    import kfuse
    if csr is None:
        A = laplacian_2d(1000).astype(dtype)
        A.indices = A.indices.astype(cp.int32)
        A.indptr = A.indptr.astype(cp.int32)
        indptr, indices, data, m = A.indptr, A.indices, A.data, A.shape[0]
    else:
        indptr, indices, data64, m = csr
        data = data64.astype(dtype)
        A = kfuse.CSR(indptr, indices, data, (m, m))
    b = cp.random.default_rng(3).standard_normal(m).astype(dtype)
    cells = {}

    def reason(e) -> str:
        return f"- ({type(e).__name__}: {str(e)[:60]})"

    def per_iteration(fn, steps=None) -> str:
        try:
            us = timed(fn, reps, warm=1)
            took = iters if steps is None else steps[0]
            return f"{us / max(took, 1):.1f}" + ("" if took == iters else f" ({took} steps)")
        except Exception as e:  # noqa: BLE001
            return reason(e)

    try:                    # kfuse's first step outside the loop: a failure there is kfuse's cell only
        r0, rr0, _ = sparse_cg._start(A, b, b * 0)

        def kf():           # the example's iteration in a device loop, the matrix in the state
            s = kfuse.fori_loop(0, iters, lambda i, s: (s[0],) + sparse_cg.cg_update(*s), (A, b * 0, r0, r0, rr0))
            return s[1]

        cells["kfuse"] = per_iteration(kf)
    except Exception as e:  # noqa: BLE001
        cells["kfuse"] = reason(e)
    kw = {"rtol" if "rtol" in inspect.signature(cpla.cg).parameters else "tol": 0.0}   # CuPy 14 names it rtol
    steps = [0]

    def count(_x):
        steps[0] += 1

    def cupy_cg():
        steps[0] = 0
        cpla.cg(A_cupy, b, maxiter=iters, callback=count, **kw)

    try:
        A_cupy = A if csr is None else cps.csr_matrix((data, indices, indptr), shape=(m, m))
        refuse_cast(A_cupy, indices)
        cells["CuPy cg"] = per_iteration(cupy_cg, steps)
    except Exception as e:  # noqa: BLE001
        cells["CuPy cg"] = reason(e)

    def torch_loop(compiled: bool):
        import torch
        At = torch.sparse_csr_tensor(torch.as_tensor(indptr), torch.as_tensor(indices), torch.as_tensor(data),
                                     size=(m, m))
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
            cells[label] = reason(e)
    lines.append(f"| {name} | {dtype} | {m} | " + " | ".join(
        cells.get(k, "-") for k in ("kfuse", "CuPy cg", "torch", "torch.compile")) + " |")


MV_HEAD = ["| matrix | dtype | rows | nnz/row | kfuse | cuSPARSE (CuPy) | torch | torch.compile | traffic limit |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
CG_HEAD = ["| matrix | dtype | rows | kfuse | CuPy cg | torch | torch.compile |",
           "| --- | --- | --- | --- | --- | --- | --- |"]


def _failure() -> str:
    return traceback.format_exc(limit=1).splitlines()[-1][:80]


def set_tables(rows, names, dtypes, reps, iters, cg_reps, bw) -> list[str]:
    """The mat-vec and CG tables on benchmarks/matrices.py's set at about ``rows`` rows (``names``:
    some of the set; None: all), each matrix with int32 and int64 indices (its row label names
    the index type; int32 refused where the matrix is too large for it), CG on the symmetric
    positive definite ones only; a table of the matrices' row-length profiles first.  One matrix
    is on the GPU at a time."""
    import cupy as cp
    from matrices import matrix_set
    profile = ["## The matrices (benchmarks/matrices.py)", "",
               "| matrix | rows | nnz | mean row | median row | longest row | empty rows | SPD | what |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    mv = ["## CSR mat-vec, the matrix set", ""] + MV_HEAD
    cg = ["## CG per iteration, the SPD matrices of the set", ""] + CG_HEAD
    for mat in matrix_set(rows, names=names):
        st = mat.stats()
        profile.append(f"| {mat.name} | {mat.rows} | {mat.nnz} | {st['mean']:.1f} | {st['median']:.0f} | {st['max']} | "
                       f"{st['empty']} | {'yes' if mat.spd else 'no'} | {mat.description} |")
        for index in ("int32", "int64"):
            label = f"{mat.name} {index}"
            try:
                host = mat.with_index(index)
            except ValueError as e:
                mv.append(f"| {label} | - | {mat.rows} | - | - ({str(e)[:80]}) | | | | |")
                continue
            indptr, indices, data = (cp.asarray(a) for a in (host.indptr, host.indices, host.data))
            for dtype in dtypes:
                try:
                    spmv_rows(label, indptr, indices, dtype, reps, bw, mv, data64=data)
                except Exception:  # noqa: BLE001
                    mv.append(f"| {label} | {dtype} | - | - | - ({_failure()}) | | | | |")
                if mat.spd:
                    try:
                        cg_rows(dtype, iters, cg_reps, cg, name=label, csr=(indptr, indices, data, mat.rows))
                    except Exception:  # noqa: BLE001
                        cg.append(f"| {label} | {dtype} | - | - ({_failure()}) | | | |")
            del indptr, indices, data, host
            cp.get_default_memory_pool().free_all_blocks()
    return profile + [""] + mv + [""] + cg


def calibration_bands(rows: int, means=(2, 4, 8)) -> list:
    """The patterns ``kfuse calibrate`` times spmv on (row lengths mean/2 to 3 mean/2), as
    ``matrices.Matrix`` (random values: the sweep needs no definiteness)."""
    from kfuse.calibration.kernels import band_pattern
    from matrices import Matrix
    out = []
    for mean in means:
        indptr, indices = band_pattern(rows, mean, seed=mean)
        data = np.random.default_rng(mean).uniform(0.5, 1.5, indices.shape[0])
        out.append(Matrix(f"calibration band ~{mean}", indptr, indices, data, rows, rows, False,
                          f"kfuse calibrate's spmv pattern, rows of {max(1, mean // 2)}-{mean + mean // 2}"))
    return out


def sweep_table(rows, names, dtypes, reps, bw) -> list[str]:
    """Issue 58's data for choosing the row mapping: kfuse's mat-vec on every matrix of the set
    and on the calibration's patterns (int32 indices) with each row mapping the kernel takes
    forced (``runtime.csr.LANES``: 0 streams a warp's rows, else that many lanes a row), beside the
    one ``mapping`` chooses; GPU time per call of 20 in a row, checked against the float64 product.  Each forced mapping gets copies of
    the index arrays, so that the binding checks (and maps) the matrix again."""
    import cupy as cp
    import cupyx.scipy.sparse as cps
    import kfuse
    from kfuse.runtime import csr as csr_inputs
    from matrices import matrix_set
    head = " | ".join(f"lanes {k}" if k else "stream" for k in csr_inputs.LANE_CHOICES)
    out = ["## Row mappings forced, the matrix set (int32 indices)", "",
           f"| matrix | dtype | mean row | chosen | {head} | traffic limit |",
           "| --- | --- | --- | --- | " + " | ".join("---" for _ in csr_inputs.LANE_CHOICES) + " | --- |"]
    prog = {dt: kfuse.compile("csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n", dtype=dt)
            for dt in dtypes}
    for mat in [*matrix_set(rows, names=names), *calibration_bands(rows)]:
        host = mat.with_index("int32")
        st = mat.stats()
        slots = [int(v) for v in csr_inputs.lane_slots(mat.row_lengths(), np)]
        chosen = csr_inputs.mapping(mat.rows, mat.nnz, st["max"], st["median"], slots)[0]
        indptr, indices, data64 = (cp.asarray(a) for a in (host.indptr, host.indices, host.data))
        ref64 = cps.csr_matrix((data64, indices, indptr), shape=(mat.rows, mat.cols))
        for dtype in dtypes:
            x = cp.random.default_rng(2).standard_normal(mat.cols).astype(dtype)
            ref, mag = ref64 @ x.astype(cp.float64), abs(ref64) @ cp.abs(x.astype(cp.float64))
            data = data64.astype(dtype)
            item = np.dtype(dtype).itemsize
            limit = (mat.nnz * (item + 4) + (mat.rows + 1) * 4 + (mat.rows + mat.cols) * item) / bw * 1e6
            cells = []
            for lanes in csr_inputs.LANE_CHOICES:
                csr_inputs.LANES = lanes
                try:
                    A = kfuse.CSR(indptr.copy(), indices.copy(), data, (mat.rows, mat.cols))
                    bound = prog[dtype].bind(A=A, x=x)
                    us = timed(bound, max(3, reps // 5), calls=20)
                    err = check(bound.result, ref, mag)
                    cells.append(f"{us:.1f}" + ("" if err < (1e-4 if dtype == "float32" else 1e-11) else " (wrong!)"))
                except Exception as e:  # noqa: BLE001 - a mapping that cannot run: its reason
                    cells.append(f"- ({type(e).__name__}: {str(e)[:40]})")
                finally:
                    csr_inputs.LANES = None
            out.append(f"| {mat.name} | {dtype} | {st['mean']:.1f} | {chosen or 'stream'} | " + " | ".join(cells)
                       + f" | {limit:.1f} |")
        del indptr, indices, data64, ref64
        cp.get_default_memory_pool().free_all_blocks()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="markdown file to write")
    ap.add_argument("--quick", action="store_true", help="fewer cases and repetitions")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--set", action="store_true",
                    help="run both tables on benchmarks/matrices.py's set at --rows (int32 and int64 indices) "
                         "instead of the synthetic bands and the 2-D Laplacian")
    ap.add_argument("--only", default=None, help="with --set: comma-separated names of the set (default: all)")
    ap.add_argument("--sweep-lanes", action="store_true",
                    help="with --set: the mat-vec with every row mapping forced, beside the chosen one (issue 58)")
    args = ap.parse_args()
    if args.sweep_lanes and not args.set:
        ap.error("--sweep-lanes goes with --set")
    names = None if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    if names is not None:
        from matrices import MATRICES          # benchmarks/ is on the path: this script's folder
        unknown = [n for n in names if n not in MATRICES]
        if unknown or not args.set:
            ap.error(f"--only: unknown matrices {unknown}; the set has {list(MATRICES)}" if unknown
                     else "--only goes with --set")
    import cupy as cp
    reps = 10 if args.quick else 50
    dtypes = ["float64"] if args.quick else ["float32", "float64"]
    iters, cg_reps = (20, 3) if args.quick else (100, 7)
    m = args.rows
    bw = copy_bandwidth(reps)
    lines = [f"# Sparse mat-vec and CG ({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()})", "",
             f"Copy bandwidth {bw / 1e9:.0f} GB/s. Times in microseconds (medians); mat-vec: one call / "
             "per call of 20 in a row.", ""]
    if args.set and args.sweep_lanes:
        lines += sweep_table(m, names, dtypes, reps, bw)
    elif args.set:
        lines += set_tables(m, names, dtypes, reps, iters, cg_reps, bw)
        args.out.write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    lines += ["## CSR mat-vec", ""] + MV_HEAD
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
                lines.append(f"| {name} | {dtype} | - | - | - ({_failure()}) | | | | |")
    lines += ["", "## CG per iteration", ""] + CG_HEAD
    for dtype in dtypes:
        try:
            cg_rows(dtype, iters, cg_reps, lines)
        except Exception:  # noqa: BLE001
            lines.append(f"| 2-D Laplacian | {dtype} | - | - ({_failure()}) | | | |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
