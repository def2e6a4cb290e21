"""Where the plain fed-back call's host time goes, per method and dtype at n = 1024: the whole call,
the executor's call, and cuGraphLaunch alone (perf_counter around each, 200 calls after warm-up);
and each graph's node count and how many kernels launch dependent (PDL)."""
import sys, time, ctypes
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
from loops import METHODS, problem, kfuse_plain
from kfuse.runtime import driver, executor

acc = {}
def wrap(cls, name, key):
    f = getattr(cls, name)
    def g(*a, **k):
        t0 = time.perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            acc[key] = acc.get(key, 0) + time.perf_counter_ns() - t0
    setattr(cls, name, g)
wrap(driver.GraphExec, "launch", "graph launch")
wrap(executor.Executor, "call", "executor call")

def xp(v, dtype):
    return cp.asarray(np.asarray(v, dtype=dtype))

for rep in range(2):
    for dtype in ("float32", "float64"):
        for method in ("cg", "bicg", "power", "lsq"):
            state = problem(method, 1024, dtype, xp)
            run = kfuse_plain(method)
            for _ in range(3):
                state = run(state, 40)
            cp.cuda.Device().synchronize()
            acc.clear()
            t0 = time.perf_counter_ns()
            state = run(state, 200)
            t1 = time.perf_counter_ns()
            cp.cuda.Device().synchronize()
            jitted_entry = None
            b = None
            ex = None
            print(f"rep {rep} {method:6s} {dtype}: call {(t1-t0)/200/1e3:6.2f} us; " +
                  ", ".join(f"{k} {v/200/1e3:6.2f}" for k, v in acc.items()), flush=True)
# the graphs: nodes and dependent launches of each binding
import gc
for o in gc.get_objects():
    if isinstance(o, executor.Executor):
        for key, b in o.bindings.items():
            deps = [L.dependent for L, _ in b.launches]
            print(f"binding {b.dtype} launches {len(b.launches)} dependent {sum(deps)} names {[L.name for L, _ in b.launches]}")
