"""Per-kernel GPU durations (CUPTI via torch.profiler) of a CG fori step at n = 1024 under the
merged-run options (SHARED_SCALARS, PREFETCH) -- does the merged kernel get shorter?"""
import sys, collections, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, torch, kfuse
import loops as B
from kfuse.runtime import merged
from torch.profiler import profile, ProfilerActivity
STEPS = 100
for m in sys.argv[1].split(","):
  for dtype in ("float32", "float64"):
    for sh, pf in [(False, False), (True, False), (False, True), (True, True), (False, False)]:
        merged.SHARED_SCALARS, merged.PREFETCH = sh, pf
        run = B.kfuse_fori(m)
        st = B.problem(m, 1024, dtype, lambda v, d: cp.asarray(v, dtype=d))
        run(st, STEPS); cp.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(st, STEPS); cp.cuda.Device().synchronize()
        agg = collections.defaultdict(list)
        for e in prof.events():
            if e.device_type.name == "CUDA":
                agg[e.name[:40]].append(e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total)
        parts = "  ".join(f"{k}: n={len(v)} med {statistics.median(v):.2f}" for k, v in sorted(agg.items()) if len(v) >= STEPS // 2)
        print(f"{m} {dtype} {'S' if sh else '-'}{'P' if pf else '-'}: {parts}", flush=True)
