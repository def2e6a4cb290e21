"""The loop-step price (cost/queued.py) against measured fori steps of random loop bodies (H100):
random compositions of gemv, gemtv, dot, axpy-like updates and normalisations over (A, x, y, z, s),
n = 1024 and 4096, both dtypes; ratio predicted / measured."""
import sys, statistics, random
sys.path.insert(0, "benchmarks")
import numpy as np, kfuse
CPU = '--cpu' in sys.argv
if CPU: sys.argv.remove('--cpu')
else:
    import cupy as cp
    import loops as L
    import solvers
from kfuse.cost.queued import step_price
def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)
OLD = {}
OPS = [lambda A, x, y, z, s: (A, x, A @ x, z, s),
       lambda A, x, y, z, s: (A, x, y, z + s * y, s),
       lambda A, x, y, z, s: (A, x, y, z, (x @ z) / (z @ z + 1.0)),
       lambda A, x, y, z, s: (A, y / kfuse.sqrt(y @ y + 1.0), y, z, s),
       lambda A, x, y, z, s: (A, x, y, A.T @ z, s),
       lambda A, x, y, z, s: (A, x - 0.01 * z, y, z, s),
       lambda A, x, y, z, s: (A, x, y - s * x, z, s),
       lambda A, x, y, z, s: (A, x, y, z, s + y @ y)]
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
ratios = []
for case in range(int(sys.argv[2]) if len(sys.argv) > 2 else 12):
    ops = [rng.randrange(len(OPS)) for _ in range(rng.randint(3, 7))]
    def make(ops):
        def body(A, x, y, z, s):
            st = (A, x, y, z, s)
            for o in ops:
                st = OPS[o](*st)
            return st
        return body
    body = make(tuple(ops))
    for n in (1024, 4096):
        for dt in ("float32", "float64"):
            h = np.random.default_rng(case)
            host = (h.standard_normal((n, n)) / np.sqrt(n), h.standard_normal(n), h.standard_normal(n), h.standard_normal(n), np.array(0.5))
            c0 = kfuse.jit(body).compile(*(np.asarray(a, dt) for a in host))
            c = c0.for_sizes({d.id: n for d in c0.program.dims})
            pred = step_price(c.search.model, c.kernels, c.search.dims, c.search.entries, c.search.itemsize)
            if CPU:
                print(f'case {case} ops {ops} n={n} {dt}: predicted {pred.seconds*1e6:6.2f} ({pred.nodes} nodes, {pred.phases} phases)', flush=True)
                continue
            state = tuple(cp.asarray(a, dtype=dt) for a in host)
            run = lambda st, k: kfuse.fori_loop(0, k, lambda i, st: body(*st), st)
            try:
                us, _ = L.timed(run, state, 100, 3, events, 5)
            except Exception as e:
                print(f"case {case} ops {ops} n={n} {dt}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            r = pred.seconds * 1e6 / us
            ratios.append(r)
            print(f"case {case} ops {ops} n={n} {dt}: measured {us:6.2f} us, predicted {pred.seconds*1e6:6.2f} "
                  f"({pred.nodes} nodes, {pred.phases} phases), ratio {r:.2f}; kernel_time sum {c.plan.predicted*1e6:6.1f}", flush=True)
ratios.sort()
if not ratios: sys.exit(0)
print(f"{len(ratios)} steps: ratio min {ratios[0]:.2f} median {statistics.median(ratios):.2f} max {ratios[-1]:.2f}; "
      f"within 0.8-1.25: {sum(0.8 <= r <= 1.25 for r in ratios)}", flush=True)
