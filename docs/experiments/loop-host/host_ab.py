"""Same-process A/B of a fori_loop call's host cost: the state checks remembered and start()'s
launches made once (new) against both done at every call (old, restored by patching); CG n = 1024,
alternating, medians of 5 rounds of 40 calls."""
import sys, time, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import kfuse
from kfuse import loops as KL
from kfuse.runtime import loop as RL

new_specs, new_start = KL._specs, RL.Instance.start
def old_start(self, *a, **k):
    self._starts = {}
    return new_start(self, *a, **k)
def setmode(old):
    KL._specs = KL._check_specs if old else new_specs
    RL.Instance.start = old_start if old else new_start

for dtype in ("float32", "float64"):
    state = L.problem("cg", 1024, dtype, lambda v, d: cp.asarray(v, dtype=d))
    step = L.METHODS["cg"][0]
    body = lambda i, s: step(*s)
    for steps in (2, 120):
        res = {False: ([], []), True: ([], [])}
        for rnd in range(5):
            for old in (True, False):
                setmode(old)
                kfuse.fori_loop(0, steps, body, state); cp.cuda.Device().synchronize()
                hs, gs = [], []
                for _ in range(40):
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    e0.record(); t0 = time.perf_counter()
                    kfuse.fori_loop(0, steps, body, state)
                    t1 = time.perf_counter(); e1.record(); e1.synchronize()
                    hs.append((t1 - t0) * 1e6); gs.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
                res[old][0].append(statistics.median(hs)); res[old][1].append(statistics.median(gs))
        o, n = res[True], res[False]
        print(f"{dtype} cg n=1024 steps {steps:3d}: host call old {statistics.median(o[0]):6.1f} new {statistics.median(n[0]):6.1f} us;"
              f" GPU old {statistics.median(o[1]):7.1f} ({statistics.median(o[1])/steps:6.2f}/step) new {statistics.median(n[1]):7.1f}"
              f" ({statistics.median(n[1])/steps:6.2f}/step)", flush=True)
setmode(False)
