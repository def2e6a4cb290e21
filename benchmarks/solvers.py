"""Iterations per second of the CG and BiCG examples (examples/solvers/, @kfuse.jit steps) beside
the same solvers written for CuPy (cuBLAS gemv/dot, one fused elementwise kernel per update),
torch eager (mv, dot, addcmul) and torch.compile (default, and mode="reduce-overhead": CUDA
graphs), on dense well-conditioned random systems.  Every contender keeps its scalars on the GPU
(0-d arrays; no .item() in the loop), runs the same number of iterations from x = 0, and is timed
with CUDA events (median of --reps runs after a warm-up run that also compiles).  The final
relative residuals ||b - A x|| / ||b|| (float64, on the host) are reported beside the times.

    PYTHONPATH=src python3 benchmarks/solvers.py OUT.md      # docs/performance.md, 'Solvers'
    PYTHONPATH=src python3 benchmarks/solvers.py out.md --sizes 1024 --dtypes float32 --solvers cg
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "solvers"))


# -- the systems ------------------------------------------------------------------------------------
def system(kind: str, n: int, dtype: str, seed: int = 0, spread: float = 16.0):
    """A (n x n) and b as CuPy arrays.  CG: symmetric positive definite with eigenvalues in about
    [1, spread] (a semicircle); BiCG: nonsymmetric, eigenvalues in a disc of half that width around
    the same centre.  With the default spread (16) 30 CG iterations reach rounding in float32; with
    100 the residual after 30 is about 1e-3, where two correct implementations differ only by
    rounding (docs/experiments.md)."""
    import cupy as cp
    rs = cp.random.RandomState(seed)
    R = rs.standard_normal((n, n), dtype=np.float64)
    if kind == "cg":
        R = (R + R.T) / np.sqrt(2.0)
    A = ((spread - 1.0) / 4.0 / np.sqrt(n)) * R
    A[cp.arange(n), cp.arange(n)] += (spread + 1.0) / 2.0
    b = rs.standard_normal(n, dtype=np.float64)
    return A.astype(dtype), b.astype(dtype)


# -- the contenders: (start, step) pairs over one framework's arrays ---------------------------------
def kfuse_solver(kind):
    import bicg
    import cg
    start = cg.cg_start if kind == "cg" else bicg.bicg_start
    step = cg.cg_step if kind == "cg" else bicg.bicg_step
    return (lambda A, b, x: start(A, b, x)[:2]), step        # (r, r . r); the examples' b . b unused


def _cg_plain(mv, dot):
    def start(A, b, x):
        r = b - mv(A, x)
        return r, dot(r, r)

    def step(A, x, r, p, rr):
        q = mv(A, p)
        alpha = rr / dot(p, q)
        x = x + alpha * p
        r = r - alpha * q
        rr_new = dot(r, r)
        p = r + (rr_new / rr) * p
        return x, r, p, rr_new
    return start, step


def _bicg_plain(mv, mtv, dot):
    def start(A, b, x):
        r = b - mv(A, x)
        return r, dot(r, r)

    def step(A, x, r, rt, p, pt, rho):
        q, qt = mv(A, p), mtv(A, pt)
        alpha = rho / dot(pt, q)
        x = x + alpha * p
        r = r - alpha * q
        rt = rt - alpha * qt
        rho_new = dot(rt, r)
        beta = rho_new / rho
        return x, r, rt, r + beta * p, rt + beta * pt, rho_new
    return start, step


def cupy_solver(kind):
    """cuBLAS products and dots (CuPy), each vector update one elementwise kernel that also
    forms its coefficient from the 0-d scalars."""
    import cupy as cp
    upd = cp.ElementwiseKernel("T num, T den, T sign, T x, T y", "T z", "z = sign * (num / den) * x + y",
                               "kf_bench_update")

    def start(A, b, x):
        r = b - A @ x
        return r, cp.dot(r, r)
    if kind == "cg":
        def step(A, x, r, p, rr):
            q = A @ p
            pq = cp.dot(p, q)
            x = upd(rr, pq, 1.0, p, x)
            r = upd(rr, pq, -1.0, q, r)
            rr_new = cp.dot(r, r)
            return x, r, upd(rr_new, rr, 1.0, p, r), rr_new
    else:
        def step(A, x, r, rt, p, pt, rho):
            q, qt = A @ p, A.T @ pt
            ptq = cp.dot(pt, q)
            x = upd(rho, ptq, 1.0, p, x)
            r = upd(rho, ptq, -1.0, q, r)
            rt = upd(rho, ptq, -1.0, qt, rt)
            rho_new = cp.dot(rt, r)
            return x, r, rt, upd(rho_new, rho, 1.0, p, r), upd(rho_new, rho, 1.0, pt, rt), rho_new
    return start, step


def torch_eager_solver(kind):
    """torch.mv / torch.dot, each update one addcmul (the coefficient a 0-d tensor)."""
    import torch

    def start(A, b, x):
        r = b - torch.mv(A, x)
        return r, torch.dot(r, r)
    if kind == "cg":
        def step(A, x, r, p, rr):
            q = torch.mv(A, p)
            alpha = rr / torch.dot(p, q)
            x = torch.addcmul(x, alpha, p)
            r = torch.addcmul(r, alpha, q, value=-1.0)
            rr_new = torch.dot(r, r)
            return x, r, torch.addcmul(r, rr_new / rr, p), rr_new
    else:
        def step(A, x, r, rt, p, pt, rho):
            q, qt = torch.mv(A, p), torch.mv(A.T, pt)
            alpha = rho / torch.dot(pt, q)
            x = torch.addcmul(x, alpha, p)
            r = torch.addcmul(r, alpha, q, value=-1.0)
            rt = torch.addcmul(rt, alpha, qt, value=-1.0)
            rho_new = torch.dot(rt, r)
            beta = rho_new / rho
            return x, r, rt, torch.addcmul(r, beta, p), torch.addcmul(rt, beta, pt), rho_new
    return start, step


def torch_compile_solver(kind, mode=None):
    import torch
    import torch._dynamo
    for name in ("cache_size_limit", "recompile_limit"):      # one step per size, dtype and mode
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    if kind == "cg":
        start, step = _cg_plain(torch.mv, torch.dot)
    else:
        start, step = _bicg_plain(torch.mv, lambda A, v: torch.mv(A.T, v), torch.dot)
    compiled = torch.compile(step, mode=mode, dynamic=False, fullgraph=True)
    if mode == "reduce-overhead":
        def stepped(*args):
            torch.compiler.cudagraph_mark_step_begin()
            return tuple(a.clone() for a in compiled(*args))     # outputs outlive the next replay
        return start, stepped
    return start, compiled


# -- running and timing ---------------------------------------------------------------------------------
class CupyEvent:
    """A CuPy CUDA event with torch.cuda.Event's methods (record, synchronize, elapsed_time in ms)."""

    def __init__(self):
        import cupy as cp
        self.cp, self.e = cp, cp.cuda.Event()

    def record(self):
        self.e.record()

    def synchronize(self):
        self.e.synchronize()

    def elapsed_time(self, other):
        return self.cp.cuda.get_elapsed_time(self.e, other.e)


def cupy_events():
    return CupyEvent(), CupyEvent()


def run(kind, start, step, A, b, iters):
    x = b * 0
    r, s = start(A, b, x)
    state = (x, r, r, s) if kind == "cg" else (x, r, r, r, r, s)
    for _ in range(iters):
        state = step(A, *state)
    return state[0]


def timed(kind, start, step, A, b, iters, reps, events):
    """(median seconds of ``iters`` steps, the final x of the last run)."""
    x = run(kind, start, step, A, b, iters)           # warm-up (and compiles)
    times = []
    for _ in range(reps):
        x0 = b * 0
        r, s = start(A, b, x0)
        state = (x0, r, r, s) if kind == "cg" else (x0, r, r, r, r, s)
        e0, e1 = events()
        e0.record()
        for _ in range(iters):
            state = step(A, *state)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3 if hasattr(e0, "elapsed_time") else 0.0)
        x = state[0]
    return statistics.median(times), x


def residual(A64, b64, x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.linalg.norm(b64 - A64 @ x) / np.linalg.norm(b64))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="markdown file to write")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--solvers", nargs="+", default=["cg", "bicg"])
    ap.add_argument("--iters", type=int, default=30, help="iterations per timed run")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--spread", type=float, default=16.0,
                    help="CG eigenvalues in about [1, SPREAD] (default 16; 100 keeps 30 iterations above rounding)")
    args = ap.parse_args(argv)

    import cupy as cp
    try:
        import torch
    except ImportError:
        torch = None

    def torch_events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    contenders = [("kfuse", kfuse_solver, "cupy"), ("CuPy", cupy_solver, "cupy")]
    if torch is not None:
        contenders.append(("torch eager", torch_eager_solver, "torch"))
        if not args.no_torch_compile:
            contenders.append(("torch.compile", torch_compile_solver, "torch"))
            contenders.append(("torch.compile (reduce-overhead, outputs cloned)",
                               lambda k: torch_compile_solver(k, "reduce-overhead"), "torch"))
    names = [c[0] for c in contenders]
    rows = []
    for kind in args.solvers:
        for dtype in args.dtypes:
            for n in args.sizes:
                A, b = system(kind, n, dtype, spread=args.spread)
                A64, b64 = cp.asnumpy(A).astype(np.float64), cp.asnumpy(b).astype(np.float64)
                row = {"solver": kind, "dtype": dtype, "n": n, "ips": {}, "res": {}, "note": {}}
                for name, make, fw in contenders:
                    t0 = time.perf_counter()
                    try:
                        start, step = make(kind)
                        if fw == "torch":
                            At, bt = torch.from_dlpack(A), torch.from_dlpack(b)
                            sec, x = timed(kind, start, step, At, bt, args.iters, args.reps, torch_events)
                            x = x.cpu().numpy()
                        else:
                            sec, x = timed(kind, start, step, A, b, args.iters, args.reps, cupy_events)
                            x = cp.asnumpy(x)
                        row["ips"][name] = args.iters / sec
                        row["res"][name] = residual(A64, b64, x)
                    except Exception as e:     # noqa: BLE001 - a peer that fails is reported, not fatal
                        row["note"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
                    print(f"{kind} {dtype} n={n} {name}: "
                          + (f"{row['ips'][name]:.0f} it/s, residual {row['res'][name]:.3e}" if name in row["ips"]
                             else row["note"][name]) + f" ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
                rows.append(row)
                del A, b
                cp.get_default_memory_pool().free_all_blocks()
                if torch is not None:
                    torch.cuda.empty_cache()
    Path(args.out).write_text(report(rows, names, args, cp, torch))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def report(rows, names, args, cp, torch) -> str:
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = [f"# Solvers: iterations per second ({gpu})", "",
             f"{datetime.date.today()}, CuPy {cp.__version__}"
             + (f", torch {torch.__version__}" if torch is not None else "") + f", Python {platform.python_version()}; "
             f"{args.iters} iterations from x = 0 per timed run, median of {args.reps}; "
             "command: `PYTHONPATH=src python3 benchmarks/solvers.py " + " ".join(sys.argv[1:]) + "`", "",
             "Iterations per second (higher is better); the last columns are kfuse's speed-up over torch.compile "
             "(the better of its two modes) and torch eager, and the largest relative difference of a "
             "contender's final residual from kfuse's.", ""]
    head = ["solver", "dtype", "n"] + names + ["vs compile", "vs eager", "residual (kfuse)", "max residual diff"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ips = r["ips"]
        cells = [r["solver"], r["dtype"], str(r["n"])]
        cells += [f"{ips[n]:.0f}" if n in ips else "failed" for n in names]
        comp = max([ips[n] for n in names if n.startswith("torch.compile") and n in ips], default=None)
        k = ips.get("kfuse")
        cells.append(f"{k / comp:.2f}x" if k and comp else "-")
        cells.append(f"{k / ips['torch eager']:.2f}x" if k and "torch eager" in ips else "-")
        res = r["res"]
        cells.append(f"{res['kfuse']:.3e}" if "kfuse" in res else "-")
        diffs = [abs(v - res["kfuse"]) / max(abs(res["kfuse"]), 1e-300) for n, v in res.items() if n != "kfuse"]
        cells.append(f"{max(diffs):.1e}" if "kfuse" in res and diffs else "-")
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['solver']} {r['dtype']} n={r['n']} {n}: {msg}" for r in rows for n, msg in r["note"].items()]
    if notes:
        lines += ["", "Failures:", ""] + notes
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
