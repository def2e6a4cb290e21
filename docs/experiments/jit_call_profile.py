"""Host time of one solver step through @kfuse.jit (examples/solvers/cg.py's cg_step) at n = 1024,
and where the call's time goes (cProfile, top entries).
Run: PYTHONPATH=src python3 docs/experiments/jit_call_profile.py"""
import cProfile
import pstats
import sys
from pathlib import Path

import cupy as cp

from explore_util import host_us_per_call

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "solvers"))
import cg  # noqa: E402


for dtype in ("float32", "float64"):
    n = 1024
    rs = cp.random.RandomState(0)
    A = rs.standard_normal((n, n)).astype(dtype)
    x, r, p = (rs.standard_normal(n).astype(dtype) for _ in range(3))
    rr = (r @ r)
    cg.cg_step(A, x, r, p, rr)
    print(f"{dtype} n={n}: jit call {host_us_per_call(lambda: cg.cg_step(A, x, r, p, rr)):.2f} us per call", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        cg.cg_step(A, x, r, p, rr)
    prof.disable()
    cp.cuda.Device().synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)
