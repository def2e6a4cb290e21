"""Where a CG step's time goes at large n (issue 17: CG at n = 16384 was 0.98x torch.compile, all
contenders bound by reading A).  For each dtype and size: the lone q = A p in kfuse (first choice,
the best wide plan, the best strip plan where strips fit), cuBLAS through CuPy and torch.mv; the
rest of the step (two dots, three axpys, given q) as a kfuse program of its own; the whole step
(`examples/solvers/cg.py`'s cg_step, first choice) and torch.compile of the same step.  CUDA-event
medians with L2 flushed before each run; every kfuse result checked against
float64 first.

    PYTHONPATH=src python3 docs/experiments/cg_step_large.py [--sizes 16384] [--dtypes float32 float64]
"""
import argparse
import re
import sys
from pathlib import Path

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "solvers"))
from explore_util import torch_cg_step  # noqa: E402

GEMV = "matrix A; vector p, q; input A, p; q = gemv(A, p); return q;"
REST = """vector x, r, p, q, x1, r1, p1; scalar rr, pq, al, rr1;
input x, r, p, q, rr;
pq = dot(p, q); al = rr / pq; x1 = axpy(al, p, x); r1 = axpy(-al, q, r);
rr1 = dot(r1, r1); p1 = axpy(rr1 / rr, p, r1); return x1, r1, p1, rr1;"""


def best_of(prog, pred, timer, bind, check, limit=400):
    """The first plan in predicted order satisfying pred, timed (or None)."""
    for k, p in enumerate(prog.search.plans()):
        if k > limit:
            return None
        if pred(p):
            q = prog.with_plan(p)
            b = bind(q)
            b(sync=True)
            check()
            return k, p.summary(), timer(b)[1]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[16384])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    args = ap.parse_args()
    cp = cupy()
    import torch
    from cg import cg_step
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for dt in args.dtypes:
        for n in args.sizes:
            rs = np.random.default_rng(n)
            A = cp.asarray(rs.standard_normal((n, n)) / np.sqrt(n), dtype=dt)
            p = cp.asarray(rs.standard_normal(n), dtype=dt)
            ref = A.astype(cp.float64) @ p.astype(cp.float64)
            tol = 1e-4 if dt == "float32" else 1e-11
            print(f"{dt} n={n}: one read of A {A.nbytes / bw / 1e3:.1f} us", flush=True)
            out = {"q": cp.full(n, cp.nan, dtype=dt)}

            def check():
                err = float(cp.linalg.norm(out["q"] - ref) / cp.linalg.norm(ref))
                assert err < tol, err
            prog = kfuse.compile(GEMV, dtype=dt, tuned=False, sizes={"A.rows": n, "A.cols": n})
            bind = lambda q: q.bind(A=A, p=p, out=out)                       # noqa: E731
            for label, pred in (("first choice", lambda pl: True),
                                ("best wide", lambda pl: "wide" in pl.summary()),
                                ("best strip", lambda pl: "strip" in pl.summary())):
                r = best_of(prog, pred, timer, bind, check)
                print(f"   q = A p, kfuse {label}: " + ("none in the first 400" if r is None else
                      f"{r[2]:.1f} us (rank {r[0]}, {r[1]})"), flush=True)
            print(f"   q = A p, cupy A @ p: {timer(lambda: A @ p)[1]:.1f} us", flush=True)
            tA, tp = torch.as_tensor(A, device="cuda"), torch.as_tensor(p, device="cuda")
            print(f"   q = A p, torch.mv: {timer(lambda: torch.mv(tA, tp))[1]:.1f} us", flush=True)

            vecs = {k: cp.asarray(rs.standard_normal(n), dtype=dt) for k in ("x", "r")}
            q = A @ p
            rr = cp.asarray(float(vecs["r"] @ vecs["r"]), dtype=dt)
            rest = kfuse.compile(REST, dtype=dt, tuned=False, sizes={"x.len": n}, device_scalars=("rr",))
            b = rest.bind(x=vecs["x"], r=vecs["r"], p=p, q=q, rr=rr)
            b(sync=True)
            print(f"   rest of the step (given q), kfuse: {timer(b)[1]:.1f} us, "
                  f"{len(rest.plan.kernels)} kernel(s) {rest.plan.summary()}", flush=True)

            x, r = vecs["x"], vecs["r"]
            cg_step(A, x, r, p, rr)
            cp.cuda.runtime.deviceSynchronize()
            print(f"   whole step, kfuse cg_step: {timer(lambda: cg_step(A, x, r, p, rr))[1]:.1f} us "
                  f"({cg_step.compiled.plan.summary()})", flush=True)

            targs = [tA] + [torch.as_tensor(v, device="cuda") for v in (x, r, p, rr)]
            cstep = torch.compile(torch_cg_step)
            for _ in range(3):
                cstep(*targs)
            torch.cuda.synchronize()
            print(f"   whole step, torch eager: {timer(lambda: torch_cg_step(*targs))[1]:.1f} us; "
                  f"torch.compile: {timer(lambda: cstep(*targs))[1]:.1f} us", flush=True)
            del A, tA


if __name__ == "__main__":
    main()
