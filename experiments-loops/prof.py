import sys, time
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import kfuse, loops as bl
for n in (1024, 4096):
    for m in ("cg", "power", "bicgstab"):
        st = bl.problem(m, n, "float32", lambda v, d: cp.asarray(v, dtype=d))
        f = kfuse.jit(bl.METHODS[m][0])
        s = st
        for _ in range(20): s = f(*s)
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(300): s = f(*s)
        cp.cuda.Device().synchronize()
        wall = (time.perf_counter() - t) / 300 * 1e6
        g = kfuse.fori_loop(0, 300, lambda i, s: bl.METHODS[m][0](*s), st); cp.cuda.Device().synchronize()
        t = time.perf_counter()
        g = kfuse.fori_loop(0, 300, lambda i, s: bl.METHODS[m][0](*s), st); cp.cuda.Device().synchronize()
        dev = (time.perf_counter() - t) / 300 * 1e6
        print(f"{m} n={n}: plain fed-back call {wall:.1f} us/step, device loop {dev:.1f} us/step (wall, 300 steps)", flush=True)
