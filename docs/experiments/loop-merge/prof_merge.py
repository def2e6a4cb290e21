"""Per-kernel GPU times of loop steps (kfuse fori_loop vs torch.compile RO unrolled), torch.profiler/CUPTI."""
import sys, os, statistics, collections, json
sys.path.insert(0, "examples/solvers"); sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, torch, kfuse
import loops as B
from torch.profiler import profile, ProfilerActivity

STEPS = 60
def events_time(run, state, sync):
    run(state, STEPS); sync()
    ts = []
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); run(state, STEPS); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / STEPS)
    return statistics.median(ts)

def kernels(run, state, sync):
    run(state, STEPS); sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(state, STEPS); sync()
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type.name == "CUDA":
            k = e.name[:60]
            agg[k][0] += 1; agg[k][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    return agg

methods = sys.argv[1].split(",") if len(sys.argv) > 1 else ["cg", "power", "bicgstab"]
sizes = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1024]
dtypes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["float32", "float64"]
for n in sizes:
  for dtype in dtypes:
    for m in methods:
        step = B.METHODS[m][0]
        cst = B.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
        tst = B.problem(m, n, dtype, lambda v, d: torch.as_tensor(v, dtype=getattr(torch, d), device="cuda"))
        from kfuse.runtime import merged
        def mm(run, mode):
            def w(s, k):
                old = merged.MODE; merged.MODE = mode
                try: return run(s, k)
                finally: merged.MODE = old
            return w
        strips = lambda s, k, f=kfuse.jit(step, vector_on_strips=True): kfuse.fori_loop(0, k, lambda i, s: f(*s), s)
        contenders = [("kfuse fori unmerged", mm(B.kfuse_fori(m), "off"), cst),
                      ("kfuse fori merged", mm(B.kfuse_fori(m), "on"), cst),
                      ("kfuse fori strips unmerged", mm(strips, "off"), cst),
                      ("kfuse fori strips merged", mm(strips, "on"), cst),
                      ("torch RO x10", B.torch_unrolled(m, 10), tst)]
        for name, run, st in contenders:
            sync = lambda: (cp.cuda.Device().synchronize(), torch.cuda.synchronize())
            try:
                t = events_time(run, st, sync)
                agg = kernels(run, st, sync)
            except Exception as e:
                print(f"{m} n={n} {dtype} {name}: FAILED {type(e).__name__}: {e}"[:300], flush=True); continue
            tot = sum(v[1] for v in agg.values()) / STEPS
            cnt = sum(v[0] for v in agg.values()) / STEPS
            print(f"== {m} n={n} {dtype} {name}: {t:.1f} us/step (events); kernels {cnt:.1f}/step, sum {tot:.1f} us/step", flush=True)
            for k, (c, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:10]:
                print(f"     {c/STEPS:5.2f}/step {us/max(c,1):7.2f} us each  {k}", flush=True)
