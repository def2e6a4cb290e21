"""In-process A/B of a device loop run's ends: one launch each (runtime/loopends.py) against the
per-entry copies and small launches before it (OldEnds below, the code it replaced).  Per step of
120-step runs and the host's time of a 2-step call, alternating, medians of 5."""
import sys, time, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import solvers
from kfuse.runtime import loopends
from kfuse.runtime.args import facts

D2D = 3
New = loopends.Ends

class OldEnds(New):
    def start(self, sources, index, consts, most, stream):
        inst = self.inst
        for j, src in zip(inst.carried, sources):
            cp.cuda.runtime.memcpyAsync(inst.ptr[0][j], src, inst.nbytes[j], D2D, stream)
        self._start_parts(index, consts, most, stream)

    def finish(self, pairs, stream):
        inst = self.inst
        for j, (dst, src) in zip(inst.carried, pairs):
            cp.cuda.runtime.memcpyAsync(dst, src, inst.nbytes[j], D2D, stream)

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

def xp(v, dtype):
    return cp.asarray(v, dtype=dtype)

used = []
for dtype in ["float32", "float64"]:
    for n, methods in [(1024, ["cg", "bicgstab", "power", "lsq"]), (4096, ["cg"])]:
        for m in methods:
            ref = L.reference(m, L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64)), 30)
            for kind in (["fori", "while"] if m in L.SOLVERS else ["fori"]):
                res = {"old": [], "new": []}
                for rep in range(5):
                    for tag, cls in (("old", OldEnds), ("new", New)):
                        loopends.Ends = cls
                        run = L.kfuse_fori(m) if kind == "fori" else L.kfuse_while(m)
                        state = L.problem(m, n, dtype, xp)
                        us, out = L.timed(run, state, 120, 3, events, 30)
                        got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        host = []
                        for _ in range(15):
                            cp.cuda.Device().synchronize()
                            t0 = time.perf_counter(); run(state, 2); host.append((time.perf_counter() - t0) * 1e6)
                        cp.cuda.Device().synchronize()
                        res[tag].append((us, statistics.median(host), err))
                o = [statistics.median(x[i] for x in res["old"]) for i in (0, 1)]
                nw = [statistics.median(x[i] for x in res["new"]) for i in (0, 1)]
                print(f"{dtype} n={n} {m:8s} {kind:5s} | per step {o[0]:6.2f} -> {nw[0]:6.2f} us ({o[0]/nw[0]:4.2f}x)"
                      f" | host a call {o[1]:6.1f} -> {nw[1]:6.1f} us | err {max(x[2] for v in res.values() for x in v):.0e}", flush=True)
