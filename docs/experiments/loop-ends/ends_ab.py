"""Per-step time of 120-step device loops and a call's host time, for the kfuse on PYTHONPATH
(run it for the old and the new code in turn): 5 methods at n = 1024, both dtypes."""
import sys, time, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import solvers
import kfuse
print("kfuse from", kfuse.__file__, flush=True)

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

def xp(v, dtype):
    return cp.asarray(v, dtype=dtype)

tag = sys.argv[1]
SIZES = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1024, 4096]
METHODS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["cg", "bicg", "bicgstab", "power", "lsq"]
for dtype in ["float32", "float64"]:
    for n in SIZES:
        for m in METHODS:
            ref_state = L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64))
            ref = L.reference(m, ref_state, 30)
            for kind in (["fori", "while"] if m in L.SOLVERS else ["fori"]):
                run = L.kfuse_fori(m) if kind == "fori" else L.kfuse_while(m)
                state = L.problem(m, n, dtype, xp)
                us, out = L.timed(run, state, 120, 7, events, 30)
                got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                host = []
                for _ in range(20):
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter(); run(state, 2); host.append((time.perf_counter() - t0) * 1e6)
                cp.cuda.Device().synchronize()
                print(f"{tag} {dtype} n={n} {m:8s} {kind:5s} {us:7.2f} us/step  host {statistics.median(host):6.1f} us/call  err {err:.0e}", flush=True)
