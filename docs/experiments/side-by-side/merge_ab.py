"""A/B of merged one-block runs in device loops (runtime/merged.py): us per step, fori and while,
MODE off / on (MAX_GRID 1, 2, 4), alternating, medians; error against float64 NumPy."""
import sys, statistics, time
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import solvers
from kfuse.runtime import merged

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

def xp(v, dtype):
    return cp.asarray(v, dtype=dtype)

configs = [("off", 1, False, 0), ("on", 1, False, 0), ("on", 1, True, 0)] if len(sys.argv) > 3 else [("off", 1, False, 0), ("on", 1, False, 0), ("on", 1, True, 0), ("on", 1, True, 1024)]
sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1024, 2048, 4096]
methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["cg", "bicg", "bicgstab", "power", "lsq"]
print("bandwidth GB/s", L.copy_bandwidth(cp) / 1e9, flush=True)
for dtype in ["float32", "float64"]:
    for n in sizes:
        for m in methods:
            ref_state = L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64))
            ref = L.reference(m, ref_state, 30)
            for kind in (["fori", "while"] if m in L.SOLVERS else ["fori"]):
                res = {}
                for rep in range(3):
                    for mode, g, sbs, blk in configs:
                        merged.MODE, merged.MAX_GRID, merged.SIDE_BY_SIDE, merged.BLOCK = mode, g, sbs, blk
                        run = L.kfuse_fori(m) if kind == "fori" else L.kfuse_while(m)
                        state = L.problem(m, n, dtype, xp)
                        before = merged.Merged.launches
                        us, out = L.timed(run, state, 120, 5, events, 30)
                        got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        used = merged.Merged.launches > before
                        res.setdefault((mode, sbs, blk), []).append((us, err, used))
                line = f"{dtype} n={n} {m:8s} {kind:5s}"
                for (mode, sbs, blk), v in res.items():
                    us = statistics.median(x[0] for x in v)
                    line += f" | {mode}{'+sbs' if sbs else ''}{blk or ''}: {us:6.2f} e{max(x[1] for x in v):.0e}{'' if v[0][2] else ' (none)' if mode=='on' else ''}"
                print(line, flush=True)
