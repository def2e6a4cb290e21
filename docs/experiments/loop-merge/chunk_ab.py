import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import solvers
from kfuse.runtime import loop
def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)
for dtype in ["float32", "float64"]:
    for n in [1024, 4096]:
        for m in ["cg", "bicg", "bicgstab"]:
            res = {}
            for rep in range(3):
                for chunk in (8, 16, 32):
                    loop.WHILE_CHUNK = chunk
                    state = L.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
                    us, _ = L.timed(L.kfuse_while(m), state, 128, 5, events, 32)
                    res.setdefault(chunk, []).append(us)
            print(f"{dtype} n={n} {m:8s} while " + " | ".join(f"chunk {c}: {statistics.median(v):6.2f}" for c, v in res.items()), flush=True)
