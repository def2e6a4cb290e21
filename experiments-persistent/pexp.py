"""Persistent-kernel experiment: CG fori per-step time vs graphs, by min blocks per SM and n."""
import sys, time, statistics
sys.path.insert(0, "examples/solvers"); sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import kfuse
from kfuse.runtime import persistent
import loops as B

def timeit(run, state, steps=120, reps=5):
    out = run(state, steps); cp.cuda.get_current_stream().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); run(state, steps); b.record(); b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / steps)
    return statistics.median(ts)

for dtype in ["float32", "float64"]:
    for n in [64, 1024, 2048, 4096]:
        for method in ["cg", "bicgstab", "power"]:
            state = B.problem(method, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
            row = []
            for mode, mb in [("off", 2), ("on", 1), ("on", 2)]:
                persistent.MODE, persistent.MIN_BLOCKS = mode, mb
                step = B.METHODS[method][0]
                run = lambda st, k: kfuse.fori_loop(0, k, lambda i, s: step(*s), st)
                try:
                    row.append(f"{mode}/{mb}: {timeit(run, state):.1f}")
                except Exception as e:
                    row.append(f"{mode}/{mb}: {type(e).__name__} {str(e)[:80]}")
            print(dtype, n, method, " | ".join(row), flush=True)
