"""A/B (issue 41): merged runs with sums kept in shared memory (SHARED_SCALARS) and the vectors
read brought into L1 at the start (PREFETCH), the four combinations in rotating order (every
order position once per config over 4 rounds), medians; lsq (no merged reductions at 1024) as a
control; error vs float64 NumPy."""
import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as L
import solvers
from kfuse.runtime import merged

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1024]
methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["cg", "bicg", "bicgstab", "power", "lsq"]
dtypes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["float32", "float64"]
CONF = [(False, False), (True, False), (False, True), (True, True)]
ORDERS = [(0, 1, 2, 3), (3, 2, 1, 0), (1, 0, 3, 2), (2, 3, 0, 1)]
print("bandwidth GB/s", L.copy_bandwidth(cp) / 1e9, flush=True)
for dtype in dtypes:
    for n in sizes:
        for m in methods:
            ref = L.reference(m, L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64)), 30)
            for kind in (["fori", "while"] if (m == "cg" and n == 1024) else ["fori"]):
                res = {}
                for order in ORDERS:
                    for ci in order:
                        merged.SHARED_SCALARS, merged.PREFETCH = CONF[ci]
                        run = L.kfuse_fori(m) if kind == "fori" else L.kfuse_while(m)
                        state = L.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
                        kept = merged.Merged.kept
                        us, out = L.timed(run, state, 200, 5, events, 30)
                        got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        res.setdefault(ci, []).append((us, err))
                line = f"{dtype} n={n} {m:8s} {kind:5s}"
                for ci in range(4):
                    v = res[ci]
                    sh, pf = CONF[ci]
                    line += f" | {'S' if sh else '-'}{'P' if pf else '-'} {statistics.median(x[0] for x in v):6.2f}"
                line += f"  err {max(x[1] for c in res.values() for x in c):.0e}"
                print(line, flush=True)
