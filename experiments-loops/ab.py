import os, sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import kfuse, loops as bl
from kfuse import loops as kl
n = int(sys.argv[1]); dtype = sys.argv[2]
class E:
    def __init__(self): self.e = cp.cuda.Event()
    def record(self): self.e.record()
    def synchronize(self): self.e.synchronize()
    def elapsed_time(self, o): return cp.cuda.get_elapsed_time(self.e, o.e)
def _ev(): return E(), E(), cp.cuda.get_current_stream().synchronize
for m in ["cg", "power", "bicgstab"]:
    step = bl.METHODS[m][0]
    st = bl.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
    res = {}
    for mode in ["fori", "while"]:
        if mode == "while" and m not in bl.SOLVERS: continue
        run = bl.kfuse_fori(m) if mode == "fori" else bl.kfuse_while(m)
        us, _ = bl.timed(run, st, 30, 5, _ev)
        res[mode] = us
    print(os.environ.get("KFUSE_LOOP_CLEAR", "1"), os.environ.get("KFUSE_LOOP_WHILE", "chunks"), m, n, dtype, {k: round(v, 1) for k, v in res.items()},
          [(i.pdl, i.conditional, len(i.kernels), len(i.clears)) for b in kl._BODIES.values() for i in b.instances.values()][-1:], flush=True)
