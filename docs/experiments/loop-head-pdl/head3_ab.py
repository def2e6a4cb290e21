"""A/B of the step's first kernel launched early through a waiting wrapper (runtime/merged.py HEAD): us per step, fori and
while, off / on alternating, medians of 3; error against float64 NumPy."""
import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import solvers
from kfuse.runtime import merged

built = []
_build = merged.build
def build(inst, folded):
    m = _build(inst, folded)
    if m is not None:
        built.append(any([m.head is not None]))
    return m
merged.build = build
import kfuse.runtime.loop as RL
if hasattr(RL, "build"): pass

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

def xp(v, dtype):
    return cp.asarray(v, dtype=dtype)

sizes = [int(s) for s in sys.argv[1].split(",")]
methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["cg", "bicg", "bicgstab", "power", "lsq"]
dtypes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["float32", "float64"]
print("bandwidth GB/s", L.copy_bandwidth(cp) / 1e9, flush=True)
for dtype in dtypes:
    for n in sizes:
        for m in methods:
            ref_state = L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64))
            ref = L.reference(m, ref_state, 30)
            for kind in (["fori", "while"] if m in L.SOLVERS else ["fori"]):
                res = {}
                for rep in range(3):
                    for on in (False, True):
                        merged.HEAD = on
                        run = L.kfuse_fori(m) if kind == "fori" else L.kfuse_while(m)
                        state = L.problem(m, n, dtype, xp)
                        nb = len(built)
                        us, out = L.timed(run, state, 120, 5, events, 30)
                        got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        res.setdefault(on, []).append((us, err, built[nb:]))
                off = statistics.median(x[0] for x in res[False])
                on = statistics.median(x[0] for x in res[True])
                flags = [b for x in res[True] for b in x[2]]
                print(f"{dtype} n={n} {m:8s} {kind:5s} | off {off:6.2f} e{max(x[1] for x in res[False]):.0e}"
                      f" | head {on:6.2f} e{max(x[1] for x in res[True]):.0e} builds {flags}"
                      f" | {off / on:5.2f}x", flush=True)
