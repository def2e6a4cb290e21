"""Ordinary array code, microseconds per call: kfuse (``@kfuse.jit`` on CuPy arrays), torch eager,
torch.compile (default mode), CuPy (its elementwise kernels and cuBLAS) and, for the Adam-style
update, ``torch.optim.Adam(fused=True)``, side by side in one run.

Each sequence is one Python function of ``xp`` (a namespace: NumPy's names for kfuse, which traces
them through ``__array_ufunc__`` / ``__array_function__``; CuPy; a torch shim) and its arrays, run
unchanged by every contender.  The PolyBench/Python BLAS-2 kernels (atax, bicg, gemver, gesummv,
mvt) are written as PolyBench's NumPy versions do (``np.dot``, ``u[:, np.newaxis]``), returning
their results.  Every result is compared with the same function in float64 (CuPy) before timing.
"kfuse strips" is kfuse with ``vector_on_strips=True`` (vector calls after a
product on its strips as well).  Times are CUDA-event medians of ``--reps`` samples, each the mean of 5 calls in a row, after
warm-up calls (which also compile); the
device-to-device copy bandwidth is measured in the same run, and "limit" is the sequence's
compulsory traffic (each input read once, each output written once) over it.

    PYTHONPATH=src python3 benchmarks/elementwise.py out.md
    PYTHONPATH=src python3 benchmarks/elementwise.py out.md --dtypes float32 --sequences logreg adam
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np


# -- the sequences: functions of a namespace and arrays ---------------------------------------------
def logreg(xp, A, x, y):
    """Logistic-regression gradient."""
    return A.T @ (1 / (1 + xp.exp(-(A @ x))) - y)


def wlsq(xp, A, x, y, w):
    """Weighted least-squares gradient (an IRLS step's)."""
    return A.T @ (w * (A @ x - y))


def huber(xp, A, x, y):
    """Huber-loss gradient: residuals clipped to [-1, 1] (our own)."""
    return A.T @ xp.clip(A @ x - y, -1.0, 1.0)


def jacobi(xp, R, b, d, x):
    """A Jacobi step and its update's max-norm."""
    xn = (b - R @ x) / d
    return xn, xp.abs(xn - x).max()


def adam(xp, p, m, v, g):
    """An Adam-style update over four vectors (bias correction folded into the step size)."""
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * (g * g)
    p = p - 1e-3 * m / (xp.sqrt(v) + 1e-8)
    return p, m, v


def rmsnorm(xp, x, w):
    """RMS normalisation with a weight (our own): a reduction, then a map that reads its result."""
    return x * w / xp.sqrt((x * x).mean() + 1e-6)


def atax(xp, A, x):
    return xp.dot(A.T, xp.dot(A, x))


def bicg(xp, A, p, r):
    return xp.dot(A, p), xp.dot(A.T, r)


def gemver(xp, A, u1, v1, u2, v2, w, x, y, z):
    A = A + xp.dot(u1[:, None], v1[None, :]) + xp.dot(u2[:, None], v2[None, :])
    x = x + 1.2 * xp.dot(A.T, y) + z
    w = w + 1.5 * xp.dot(A, x)
    return A, x, w


def gesummv(xp, A, B, x):
    return 1.5 * xp.dot(A, x) + 1.2 * xp.dot(B, x)


def mvt(xp, A, x1, x2, y1, y2):
    return x1 + xp.dot(A, y1), x2 + xp.dot(A.T, y2)


# name: (function, argument shapes: "M" n x n, "v" n, "V" N (the vector length), compulsory traffic in
#        entries (n, N) -> count)
SEQUENCES = {
    "logreg": (logreg, "Mvv", lambda n, N: n * n + 3 * n),
    "wlsq": (wlsq, "Mvvv", lambda n, N: n * n + 4 * n),
    "huber": (huber, "Mvv", lambda n, N: n * n + 3 * n),
    "jacobi": (jacobi, "Mvpv", lambda n, N: n * n + 4 * n),
    "adam": (adam, "VVpV", lambda n, N: 7 * N),
    "rmsnorm": (rmsnorm, "VV", lambda n, N: 3 * N),
    "atax": (atax, "Mv", lambda n, N: n * n + 2 * n),
    "bicg": (bicg, "Mvv", lambda n, N: n * n + 4 * n),
    "gemver": (gemver, "Mvvvvvvvv", lambda n, N: 2 * n * n + 10 * n),
    "gesummv": (gesummv, "MMv", lambda n, N: 2 * n * n + 2 * n),
    "mvt": (mvt, "Mvvvv", lambda n, N: n * n + 6 * n),
}


def torch_namespace():
    import torch
    return SimpleNamespace(exp=torch.exp, sqrt=torch.sqrt, abs=torch.abs, clip=torch.clamp,
                           dot=lambda a, b: a @ b)


# -- inputs -----------------------------------------------------------------------------------------------
def inputs(kinds: str, n: int, N: int, dtype: str, seed: int):
    """Float64 CuPy arrays (the reference's) of the sequence's shapes: "p" a positive vector."""
    import cupy as cp
    rs = cp.random.RandomState(seed)
    out = []
    for k in kinds:
        if k == "M":
            out.append(rs.standard_normal((n, n)) / np.sqrt(n))
        elif k == "V":
            out.append(rs.uniform(0.1, 1.0, N))
        elif k == "p":
            out.append(rs.uniform(1.0, 2.0, n if "M" in kinds else N))
        else:
            out.append(rs.standard_normal(n))
    return out


def rel_error(got, ref) -> float:
    import cupy as cp
    got = cp.asarray(got, dtype=np.float64) if not hasattr(got, "cpu") else cp.asarray(got.double())
    return float(cp.max(cp.abs(got - ref)) / max(float(cp.max(cp.abs(ref))), 1e-300))


# -- timing -------------------------------------------------------------------------------------------------
INNER = 5       # calls timed together


def event_median(call, reps: int, warmup: int, torch_events: bool = False) -> float:
    """Median seconds of one call, by CUDA events on the current stream (each sample the mean of
    INNER calls in a row)."""
    if torch_events:
        import torch
        make, sync = (lambda: torch.cuda.Event(enable_timing=True)), torch.cuda.synchronize
        elapsed = lambda a, b: a.elapsed_time(b)      # noqa: E731
    else:
        import cupy as cp
        make, sync, elapsed = cp.cuda.Event, cp.cuda.Device().synchronize, cp.cuda.get_elapsed_time
    for _ in range(warmup):
        call()
    sync()
    times = []
    for _ in range(reps):           # INNER calls back to back: the host's launch path hides behind the GPU
        a, b = make(), make()
        a.record()
        for _ in range(INNER):
            call()
        b.record()
        b.synchronize()
        times.append(elapsed(a, b) / 1e3 / INNER)
    return statistics.median(times)


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    import cupy as cp
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    t = event_median(lambda: cp.copyto(dst, src), 20, 3)
    return 2 * src.nbytes / t


def contenders(name: str, fn, ref_args, dtype: str, torch_ok: bool):
    """(contender, call, framework, checked) tuples: each call runs the sequence once."""
    import cupy as cp
    import kfuse
    args = [a.astype(dtype) for a in ref_args]
    params = ", ".join(f"a{k}" for k in range(len(args)))
    traced = eval(f"lambda {params}: fn(np, {params})", {"fn": fn, "np": np})     # noqa: S307 - our own text
    jf = kfuse.jit(traced)
    out = [("kfuse", lambda: jf(*args), "cupy", True), ("cupy", lambda: fn(cp, *args), "cupy", True)]
    if "M" in SEQUENCES[name][1]:       # vector calls after the last product on its strips too
        js = kfuse.jit(traced, vector_on_strips=True)
        out.insert(1, ("kfuse strips", lambda: js(*args), "cupy", True))
    if torch_ok:
        import torch
        tns = torch_namespace()
        targs = [torch.as_tensor(a, device="cuda") for a in args]
        out.append(("torch", lambda: fn(tns, *targs), "torch", True))
        torch._dynamo.reset()       # a fresh cache per sequence: no recompile limit reached across them
        compiled = torch.compile(lambda *a: fn(tns, *a))
        out.append(("torch.compile", lambda: compiled(*targs), "torch", True))
        if name == "adam":
            p = targs[0].clone().requires_grad_(True)
            p.grad = targs[3].clone()
            opt = torch.optim.Adam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, fused=True)
            out.append(("Adam(fused=True)", opt.step, "torch", False))
    return out


def run(opts, save=lambda rows: None) -> list[dict]:
    import cupy as cp
    try:
        import torch
        torch_ok = torch.cuda.is_available()
    except ImportError:
        torch_ok = False
    bw = copy_bandwidth()
    rows = []
    for dtype in opts.dtypes:
        item = np.dtype(dtype).itemsize
        for name in opts.sequences:
            fn, kinds, traffic = SEQUENCES[name]
            ref_args = inputs(kinds, opts.n, opts.N, dtype, seed=len(name))
            ref_args = [a.astype(dtype).astype(np.float64) for a in ref_args]
            ref = fn(cp, *ref_args)
            ref = ref if isinstance(ref, tuple) else (ref,)
            limit = traffic(opts.n, opts.N) * item / bw
            row = {"sequence": name, "dtype": dtype, "limit_us": limit * 1e6, "bandwidth_GBs": bw / 1e9}
            for who, call, framework, checked in contenders(name, fn, ref_args, dtype, torch_ok):
                t0 = time.perf_counter()
                try:
                    got = call()
                    if checked:
                        got = got if isinstance(got, tuple) else (got,)
                        row[f"{who} error"] = max(rel_error(g, r) for g, r in zip(got, ref))
                    row[f"{who} us"] = event_median(call, opts.reps, 3, framework == "torch") * 1e6
                except Exception as e:  # noqa: BLE001 - a contender that cannot run the sequence: say why
                    row[f"{who} us"] = None
                    row[f"{who} failed"] = f"{type(e).__name__}: {str(e)[:160]}"
                print(f"{dtype} {name:8s} {who:16s} {row.get(f'{who} us')!s:>10.10} us  "
                      f"(error {row.get(f'{who} error', '-')!s:.8}, {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
            rows.append(row)
            save(rows)          # what is measured so far survives a run cut short
            cp.get_default_memory_pool().free_all_blocks()
    return rows


def table(rows: list[dict], opts) -> str:
    who = ["kfuse", "kfuse strips", "torch", "torch.compile", "cupy", "Adam(fused=True)"]
    lines = [f"n = {opts.n} (matrices n x n), N = {opts.N} (vectors of the elementwise sequences); copy bandwidth "
             f"{rows[0]['bandwidth_GBs']:.0f} GB/s; microseconds per call, CUDA-event medians of {opts.reps} samples of {INNER} calls", "",
             "| sequence | dtype | limit | " + " | ".join(who) + " | kfuse / limit | best peer / kfuse |",
             "| --- | --- | ---: | " + " | ".join("---:" for _ in who) + " | ---: | ---: |"]
    for r in rows:
        cells = [f"{r[f'{w} us']:.1f}" if r.get(f"{w} us") else ("failed" if f"{w} failed" in r else "-") for w in who]
        peers = [r[f"{w} us"] for w in who[2:] if r.get(f"{w} us")]
        k = r.get("kfuse us")
        ratio = f"{k / r['limit_us']:.2f}" if k else "-"
        lead = f"{min(peers) / k:.2f}" if k and peers else "-"
        lines.append(f"| {r['sequence']} | {r['dtype']} | {r['limit_us']:.1f} | " + " | ".join(cells)
                     + f" | {ratio} | {lead} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the table (Markdown); the raw rows go beside it as .json")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--N", type=int, default=1 << 26)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--sequences", nargs="+", default=list(SEQUENCES), choices=list(SEQUENCES))
    ap.add_argument("--reps", type=int, default=20)
    opts = ap.parse_args()
    out = Path(opts.out)

    def save(rows):
        out.write_text(f"# Ordinary array code ({_gpu()})\n\n`{' '.join(sys.argv)}`\n\n" + table(rows, opts))
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    rows = run(opts, save)
    print(table(rows, opts))


def _gpu() -> str:
    import cupy as cp
    return cp.cuda.runtime.getDeviceProperties(0)["name"].decode() + f", {platform.node()}"


if __name__ == "__main__":
    main()
