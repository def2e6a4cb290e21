import sys, os, statistics
sys.path.insert(0, "examples/solvers"); sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as B
from kfuse.runtime import persistent

def timeit(run, state, steps, reps=3):
    run(state, steps); cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); run(state, steps); b.record(); b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / steps)
    return statistics.median(ts)

sizes = [int(s) for s in sys.argv[1].split(",")]
for n in sizes:
  for dtype in ["float32", "float64"]:
    for m in ["cg", "power", "bicgstab"]:
        state = B.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
        step = B.METHODS[m][0]
        out = []
        persistent.MODE = "off"
        fori = lambda st, k: kfuse.fori_loop(0, k, lambda i, s: step(*s), st)
        out.append(f"graphs {timeit(fori, state, 1200):.2f}")
        persistent.MODE = "on"
        for cap in [4, 8, 16, 32, 64, 132, 0]:
            os.environ["KFUSE_PERSISTENT_GRID_CAP"] = str(cap)
            fori = lambda st, k, cap=cap: kfuse.fori_loop(0, k, lambda i, s: step(*s), st)
            try:
                out.append(f"p{cap} {timeit(fori, state, 1200):.2f}")
            except Exception as e:
                out.append(f"p{cap} ERR {type(e).__name__} {str(e)[:80]}")
        persistent.MODE = "off"
        print(f"{m} n={n} {dtype}: " + "  ".join(out), flush=True)
