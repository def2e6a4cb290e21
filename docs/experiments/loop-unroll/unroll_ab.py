"""fori_loop(..., unroll=2) against unroll=1, alternating in one process (medians of 3, 120 steps):
CG and power iteration (nothing fuses across their step boundary) and a body of vector updates
(it fuses across), n = 1024 and 4096 (and 2^20 for the vector body), both dtypes."""
import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as L
import solvers

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

def relax(i, s):
    x, v, w = s
    return x + 0.1 * v, 0.9 * v - 0.01 * x + 0.001 * w, w

for dt in ("float32", "float64"):
    cases = []
    for m in ("cg", "power"):
        for n in (1024, 4096):
            st = L.problem(m, n, dt, lambda v, d: cp.asarray(np.asarray(v, dtype=d)))
            step = L.METHODS[m][0]
            cases.append((f"{m} n={n}", (lambda i, s, step=step: step(*s)), st))
    for n in (4096, 1 << 20):
        rng = np.random.default_rng(1)
        st = tuple(cp.asarray(rng.standard_normal(n), dtype=dt) for _ in range(3))
        cases.append((f"vector body n={n}", relax, st))
    for name, body, st in cases:
        runs = {u: (lambda s, k, u=u, body=body: kfuse.fori_loop(0, k, body, s, unroll=u)) for u in (1, 2)}
        t = {1: [], 2: []}
        for u in (1, 2):
            runs[u](st, 30); runs[u](st, 120)
        for _ in range(3):
            for u in (1, 2):
                us, _ = L.timed(runs[u], st, 120, 1, events, 2)
                t[u].append(us)
        a, b = statistics.median(t[1]), statistics.median(t[2])
        print(f"{dt} {name}: unroll 1 {a:.2f} us/step, unroll 2 {b:.2f} ({a / b:.2f}x)", flush=True)
