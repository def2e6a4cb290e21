"""Headed merged runs: off / head / head with __restrict__ kept / head, restrict and 4 blocks an SM
(__launch_bounds__(T, 4)); us per fori step, medians of 3, alternating."""
import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import solvers
from kfuse.runtime import merged, loop
from kfuse.codegen import module

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

def xp(v, dtype):
    return cp.asarray(v, dtype=dtype)

tag = [0]
orig_key = loop.Instance.key
loop.Instance.key = staticmethod(lambda b, l, p: orig_key(b, l, p) + (tag[0],))
orig_text = merged.kernel_text
minb = [0]
def text(shape, dtype, name):
    t = orig_text(shape, dtype, name)
    if shape.head and minb[0]:
        t = t.replace(f"__launch_bounds__({shape.threads})", f"__launch_bounds__({shape.threads}, {minb[0]})")
    return t
merged.kernel_text = text
HEAD0 = module.PERSISTENT_HEAD
configs = {"off": (False, True, 0), "head": (True, True, 0), "head+r": (True, False, 0), "head+r+4": (True, False, 4)}
sizes = [int(s) for s in sys.argv[1].split(",")]
methods = sys.argv[2].split(",")
print("bandwidth GB/s", L.copy_bandwidth(cp) / 1e9, flush=True)
for dtype in ["float32", "float64"]:
    for n in sizes:
        for m in methods:
            ref_state = L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64))
            ref = L.reference(m, ref_state, 30)
            res = {}
            for rep in range(3):
                for i, (name, (head, nores, mb)) in enumerate(configs.items()):
                    merged.HEAD, minb[0], tag[0] = head, mb, i
                    module.PERSISTENT_HEAD = HEAD0 if nores else "// restrict kept (experiment)"
                    state = L.problem(m, n, dtype, xp)
                    us, out = L.timed(L.kfuse_fori(m), state, 120, 5, events, 30)
                    got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                    err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                    res.setdefault(name, []).append((us, err))
            print(f"{dtype} n={n} {m:8s} " + " | ".join(
                f"{k} {statistics.median(x[0] for x in v):6.2f} e{max(x[1] for x in v):.0e}" for k, v in res.items()), flush=True)
