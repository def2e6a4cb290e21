"""Host time of one solver step through @kfuse.jit (examples/solvers/cg.py's cg_step) against the
same program's plain and bound calls, and where the jit call's time goes (cProfile, top entries).
Run: PYTHONPATH=src python3 docs/experiments/jit_call_profile.py"""
import cProfile
import pstats
import sys
import time
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "solvers"))
import cg  # noqa: E402


def per(fn, n=3000):
    for _ in range(50):
        fn()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / n * 1e6


for dtype in ("float32", "float64"):
    n = 1024
    rs = cp.random.RandomState(0)
    A = rs.standard_normal((n, n)).astype(dtype)
    x, r, p = (rs.standard_normal(n).astype(dtype) for _ in range(3))
    rr = (r @ r)
    cg.cg_step(A, x, r, p, rr)
    print(f"{dtype} n={n}: jit call {per(lambda: cg.cg_step(A, x, r, p, rr)):.2f} us per call", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        cg.cg_step(A, x, r, p, rr)
    prof.disable()
    cp.cuda.Device().synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)
