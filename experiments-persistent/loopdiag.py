import sys, os, statistics
sys.path.insert(0, "examples/solvers"); sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as B

def timeit(run, state, steps=60, reps=3):
    run(state, steps); cp.cuda.get_current_stream().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); run(state, steps); b.record(); b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / steps)
    return statistics.median(ts)

for method in ["power", "cg"]:
    n, dtype = 4096, "float64"
    state = B.problem(method, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
    out = []
    from kfuse.runtime import loop as L
    for alt in ["pdl", "nopdl", "chunk1", "chunk8"]:
        os.environ["KFUSE_PDL"] = "0" if alt == "nopdl" else "1"
        L.CHUNK_LAUNCHES = {"chunk1": 4, "chunk8": 40}.get(alt, 512)
        step = B.METHODS[method][0]
        fori = lambda st, k, step=step: kfuse.fori_loop(0, k, lambda i, s: step(*s), st)
        jitted = kfuse.jit(step)
        def plain(st, k, jitted=jitted):
            for _ in range(k):
                st = jitted(*st)
            return st
        out.append(f"alt={alt}: fori {timeit(fori, state):.1f} plain {timeit(plain, state):.1f}")
    print(method, dtype, n, " | ".join(out), flush=True)
