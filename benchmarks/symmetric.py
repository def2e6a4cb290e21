"""symv and trmv (upper triangle read) against kfuse's gemv and cuBLAS (CuPy's A @ x), with the
copy bandwidth and the traffic limit measured in the same run (GPU).  Issue 42's goal: symv at
n = 8192 float32 at most 0.55x the time of kfuse's gemv.

    PYTHONPATH=src python benchmarks/symmetric.py [--n 8192,4096] [--dtypes float32,float64] [--out FILE]

Medians of CUDA-event timings (runtime/timing.median_us) of each compiled script on the same
arrays, outputs preallocated (symv's and trmv's include the clear of their output); every
result checked against float64 NumPy (symv with the lower triangle NaN-poisoned).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

import kfuse
from kfuse.runtime.timing import median_us

SCRIPTS = {
    "gemv": "matrix A[n, n]; vector x[n], y[n]; input A, x; y = gemv(A, x); return y;",
    "symv": "matrix A[n, n]; vector x[n], y[n]; input A, x; y = symv(A, x); return y;",
    "trmv": "matrix A[n, n]; vector x[n], y[n]; input A, x; y = trmv(A, x); return y;",
}


def copy_bandwidth(cp, nbytes: int) -> float:
    """Bytes per second of a device-to-device copy (read + write counted)."""
    a = cp.empty(nbytes // 4, dtype=cp.float32)
    b = cp.empty_like(a)
    us = median_us(lambda: b.__setitem__(Ellipsis, a), reps=30)
    return 2 * nbytes / (us * 1e-6)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="8192,4096")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--out", type=Path, default=None, help="markdown file to write (default: print only)")
    args = ap.parse_args(argv)
    import cupy as cp
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    bw = copy_bandwidth(cp, 1 << 30)
    lines = [f"# symv and trmv on {name}", "",
             f"Copy bandwidth {bw / 1e9:.0f} GB/s; `limit`: the bytes of the upper triangle (symv, trmv) or the "
             "whole matrix (gemv) plus the vectors, over it. Microseconds, medians of 50 CUDA-event timings. "
             f"Command: `python benchmarks/symmetric.py {' '.join(argv or sys.argv[1:])}`.", "",
             "| n | dtype | gemv | symv | trmv | cuBLAS gemv | symv / gemv | symv limit | gemv limit | max error |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rng = np.random.default_rng(0)
    for dtype in args.dtypes.split(","):
        for n in (int(v) for v in args.n.split(",")):
            A64 = rng.standard_normal((n, n))
            S64 = np.triu(A64) + np.triu(A64, 1).T
            x64 = rng.standard_normal(n)
            A = cp.asarray(A64.astype(dtype))
            Au = cp.asarray(np.where(np.triu(np.ones((n, n), bool)), A64, np.nan).astype(dtype))
            x = cp.asarray(x64.astype(dtype))
            y = cp.empty(n, dtype=dtype)
            times, errs = {}, []
            for fn, mat, want in (("gemv", A, A64 @ x64), ("symv", Au, S64 @ x64), ("trmv", Au, np.triu(A64) @ x64)):
                prog = kfuse.compile(SCRIPTS[fn], dtype=dtype, tuned=False, sizes={"n": n})
                y[...] = np.nan
                prog(A=mat, x=x, out={"y": y}, sync=True)
                errs.append(float(np.linalg.norm(cp.asnumpy(y) - want) / np.linalg.norm(want)))
                times[fn] = median_us(lambda: prog(A=mat, x=x, out={"y": y}), reps=50)
            times["cublas"] = median_us(lambda: A @ x, reps=50)
            item = np.dtype(dtype).itemsize
            tri = (n * (n + 1) // 2 + 2 * n) * item / bw * 1e6
            full = (n * n + 2 * n) * item / bw * 1e6
            lines.append(f"| {n} | {dtype} | {times['gemv']:.1f} | {times['symv']:.1f} | {times['trmv']:.1f} | "
                         f"{times['cublas']:.1f} | {times['symv'] / times['gemv']:.2f} | {tri:.1f} | {full:.1f} | "
                         f"{max(errs):.1e} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
