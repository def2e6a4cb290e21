"""Why the plain fed-back loop's host time per call differs between methods and dtypes at n = 1024:
per method and dtype, over 120 fed-back calls after warm-up: graph captures, graph replays, direct
launches, result-block allocations, host us per call; then cProfile of CG float32 and float64."""
import cProfile, pstats, sys, time, io
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
from loops import METHODS, problem, kfuse_plain
from kfuse.runtime import driver, executor, binding as bmod

counts = {}
def wrap(cls, name, key):
    f = getattr(cls, name)
    def g(*a, **k):
        counts[key] = counts.get(key, 0) + 1
        return f(*a, **k)
    setattr(cls, name, g)
wrap(driver.GraphExec, "launch", "replays")
wrap(executor.Graphs, "capture", "captures")
wrap(bmod.Binding, "launch_all", "direct")
wrap(executor.Executor, "_allocate", "allocs")

def xp(v, dtype):
    return cp.asarray(np.asarray(v, dtype=dtype))

for n in (1024,):
    for dtype in ("float32", "float64"):
        for method in ("cg", "bicg", "bicgstab", "power", "lsq"):
            state = problem(method, n, dtype, xp)
            run = kfuse_plain(method)
            for _ in range(3):
                state = run(state, 30)
            cp.cuda.Device().synchronize()
            counts.clear()
            c0 = driver.GraphExec.captures
            t0 = time.perf_counter()
            state = run(state, 120)
            t1 = time.perf_counter()
            cp.cuda.Device().synchronize()
            t2 = time.perf_counter()
            print(f"{method:9s} {dtype} n={n}: host {1e6*(t1-t0)/120:6.2f} us/call, with sync {1e6*(t2-t0)/120:6.2f}; "
                  f"{dict(counts)} instantiated {driver.GraphExec.captures - c0}", flush=True)
for dtype in ("float32", "float64"):
    state = problem("cg", 1024, dtype, xp)
    run = kfuse_plain("cg")
    state = run(state, 60)
    pr = cProfile.Profile()
    pr.enable()
    state = run(state, 400)
    pr.disable()
    cp.cuda.Device().synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print(f"---- cProfile, cg {dtype}, 400 calls\n" + s.getvalue()[-4500:], flush=True)
