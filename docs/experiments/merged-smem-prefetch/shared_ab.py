"""A/B (issue 41): merged runs keeping a step's sums in shared memory (merged.SHARED_SCALARS) off/on,
fori (and while at 1024 for the solvers), alternating, medians of 3 x 5 runs; error vs float64 NumPy."""
import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as L
import solvers
from kfuse.runtime import merged

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1024, 2048]
methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["cg", "bicg", "bicgstab", "power", "lsq"]
print("bandwidth GB/s", L.copy_bandwidth(cp) / 1e9, flush=True)
for dtype in ["float32", "float64"]:
    for n in sizes:
        for m in methods:
            ref = L.reference(m, L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64)), 30)
            for kind in (["fori", "while"] if (m in L.SOLVERS and n == 1024) else ["fori"]):
                res = {}
                for rep in range(4):
                    for on in ((False, True) if rep % 2 == 0 else (True, False)):
                        merged.SHARED_SCALARS = on
                        run = L.kfuse_fori(m) if kind == "fori" else L.kfuse_while(m)
                        state = L.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
                        kept = merged.Merged.kept
                        us, out = L.timed(run, state, 200, 5, events, 30)
                        got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        res.setdefault(on, []).append((us, err, merged.Merged.kept > kept))
                line = f"{dtype} n={n} {m:8s} {kind:5s}"
                for on, v in res.items():
                    line += f" | shared={'on ' if on else 'off'}: {statistics.median(x[0] for x in v):6.2f} e{max(x[1] for x in v):.0e}{' kept' if v[0][2] else ''}"
                print(line, flush=True)
