"""At n = 1024 in a device loop A sits in L2: do gemvs over more blocks (R = 1: 8 rows a block, 128
blocks; other forms) beat the default (strip8/R2: 64 blocks)?  Pinned plans, fori loop, medians."""
import sys, statistics, itertools, re
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as L
import solvers
from kfuse import loops as kloops
from kfuse.cli import _plan_line
def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)
for dtype in ("float32", "float64"):
  for n in (1024, 2048):
    for m in ("cg", "power", "bicgstab"):
        step = L.METHODS[m][0]
        body_fn = lambda i, s, step=step: step(*s)
        state = L.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
        run = lambda st, k: kfuse.fori_loop(0, k, body_fn, st)
        run(state, 2)
        body, _ = kloops._body(body_fn, True, state, "fori_loop")
        default = body.compiled
        sized = default.for_sizes({d.id: n for d in default.program.dims})
        chosen, seen = [], set()
        for k, p in enumerate(itertools.islice(sized.search.plans(), 3000)):
            line = _plan_line(p, False)
            g = re.findall(r"c\d+_gemt?v[^|]*", line)
            key = tuple(re.sub(r"^c\d+_", "", x.strip()) for x in g)
            if key not in seen:
                seen.add(key); chosen.append((k, p, " | ".join(g)))
        chosen = chosen[:10]
        res = {}
        for rep in range(3):
            for idx, (k, p, line) in enumerate([(-1, None, "default")] + chosen):
                body.compiled = default if p is None else sized.with_plan(p)
                body.instances.clear()
                try:
                    us, _ = L.timed(run, state, 200, 3, events, 20)
                except Exception as e:
                    print(f"  {m} plan {k} FAILED {type(e).__name__}: {str(e)[:150]}", flush=True); continue
                res.setdefault(idx, []).append(us)
        body.compiled = default; body.instances.clear()
        base = statistics.median(res[0])
        print(f"== {dtype} n={n} {m}: default {base:.2f}", flush=True)
        for idx in sorted(res, key=lambda i: statistics.median(res[i]))[:6]:
            k, p, line = ([(-1, None, "default")] + chosen)[idx]
            print(f"   {statistics.median(res[idx]):6.2f} ({statistics.median(res[idx]) / base:.2f}x) rank {k}: {line}", flush=True)
