"""A fori_loop call's host time by part (CG n = 1024 float32, 120 steps): each part wrapped with
perf_counter, medians over 200 calls; and single CUDA API calls for scale."""
import sys, time, statistics, functools
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import kfuse
from kfuse import loops as KL
from kfuse.runtime import loop as RL
from kfuse.runtime.args import facts

acc = {}
def timed(name, fn):
    @functools.wraps(fn)
    def w(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)
    return w

KL._body = timed("_body", KL._body)
KL._specs = timed("_specs", KL._specs)
KL._instance = timed("_instance", KL._instance)
RL.Instance.key = staticmethod(timed("Instance.key", RL.Instance.key))
for m in ("start", "run_counted", "finish", "_leaf", "_clear", "_launch"):
    setattr(RL.Instance, m, timed(m, getattr(RL.Instance, m)))
KL._rebuild = timed("_rebuild", KL._rebuild)
total = []
state = L.problem("cg", 1024, "float32", lambda v, d: cp.asarray(v, dtype=d))
step = L.METHODS["cg"][0]
body = lambda i, s: step(*s)
for _ in range(20):
    kfuse.fori_loop(0, 120, body, state)
cp.cuda.Device().synchronize()
acc.clear()
for _ in range(200):
    t0 = time.perf_counter()
    kfuse.fori_loop(0, 120, body, state)
    total.append((time.perf_counter() - t0) * 1e6)
    cp.cuda.Device().synchronize()
print("fori_loop call %.1f us (median of 200)" % statistics.median(total))
for k, v in sorted(acc.items(), key=lambda kv: -sum(kv[1])):
    print(f"  {k:14s} {statistics.median(v):7.1f} us x {len(v) // 200}")
a, b = cp.empty(1024, np.float32), cp.empty(1024, np.float32)
s = cp.cuda.get_current_stream().ptr
for name, f in (("memcpyAsync", lambda: cp.cuda.runtime.memcpyAsync(a.data.ptr, b.data.ptr, 4096, 3, s)),
                ("cupy.empty", lambda: cp.empty(1024, np.float32)),
                ("facts", lambda: facts(a)),
                ("get_current_stream", lambda: cp.cuda.get_current_stream().ptr),
                ("Device ctx", lambda: cp.cuda.Device(0).__enter__())):
    t = []
    for _ in range(500):
        t0 = time.perf_counter(); f(); t.append((time.perf_counter() - t0) * 1e6)
    print(f"  one {name}: {statistics.median(t):.2f} us")
