"""A device loop whose step is one gemv (y = A x, x fixed), against CG's and power iteration's steps,
n = 4096 (and 1024), both dtypes: how much of a step is the pass over A."""
import sys
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as L
import solvers

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

def gemv(A, x, y):
    return A, x, A @ x

def gemv_fed(A, x):
    y = A @ x
    return A, y * 0.5

for n in (4096, 1024):
    for dt in ("float32", "float64"):
        rng = np.random.default_rng(0)
        A = cp.asarray((rng.standard_normal((n, n)) / np.sqrt(n)).astype(dt))
        x = cp.asarray(rng.standard_normal(n).astype(dt))
        out = {}
        for name, body, st in (("gemv", gemv, (A, x, cp.empty_like(x))), ("gemv fed back", gemv_fed, (A, x))):
            run = lambda s, k, body=body: kfuse.fori_loop(0, k, lambda i, s: body(*s), s)
            us, _ = L.timed(run, st, 120, 5, events, 3)
            out[name] = us
        for m in ("cg", "power"):
            st = L.problem(m, n, dt, lambda v, d: cp.asarray(np.asarray(v, dtype=d)))
            us, _ = L.timed(L.kfuse_fori(m), st, 120, 5, events, 3)
            out[m] = us
        print(f"n={n} {dt}: " + ", ".join(f"{k} {v:.2f} us" for k, v in out.items()), flush=True)
