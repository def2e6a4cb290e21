"""Host time of CG's loop through @kfuse.jit (examples/solvers/cg.py), fed back as a solver feeds
it (each step's results are the next step's inputs), at a size where the GPU work is small
(n = 256): wall time per iteration, the share of each part of the call path (each wrapped in a
timer, which adds its own cost), whether the launches replay from graphs, and the same loop in
torch eager for the host's speed.

    PYTHONPATH=src python3 docs/experiments/cg_host.py [--n 256] [--iters 3000]
"""
import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import cupy as cp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "solvers"))
sys.path.insert(0, str(ROOT / "docs" / "experiments"))
import cg  # noqa: E402
from explore_util import torch_cg_step  # noqa: E402

from kfuse.runtime import executor as ex  # noqa: E402


def loop(step, A, x, r, p, rr, iters):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        x, r, p, rr = step(A, x, r, p, rr)
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t) / iters * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--iters", type=int, default=3000)
    a = ap.parse_args()
    import torch
    for dtype in ("float32", "float64"):
        rs = cp.random.RandomState(0)
        A = rs.standard_normal((a.n, a.n)).astype(dtype)
        A = A @ A.T + a.n * cp.eye(a.n, dtype=dtype)
        b = rs.standard_normal(a.n).astype(dtype)
        x = cp.zeros_like(b)
        r, rr = cg.cg_start(A, b, x)
        p = r
        loop(cg.cg_step, A, x, r, p, rr, 50)
        plain = min(loop(cg.cg_step, A, x, r, p, rr, a.iters) for _ in range(3))
        tA, tx, tr, tp, trr = (torch.as_tensor(v, device="cuda") for v in (A, x, r, p, rr))
        loop(torch_cg_step, tA, tx, tr, tp, trr, 50)
        eager = min(loop(torch_cg_step, tA, tx, tr, tp, trr, a.iters) for _ in range(3))
        # where the time goes: each part wrapped in a timer
        spent = defaultdict(float)
        orig = {}
        for name in ("_read", "_allocate", "_launch", "_result", "_stream", "_temporaries", "call"):
            f = getattr(ex.Executor, name)
            orig[name] = f

            def timed(self, *args, _f=f, _n=name):
                t = time.perf_counter()
                try:
                    return _f(self, *args)
                finally:
                    spent[_n] += time.perf_counter() - t
            setattr(ex.Executor, name, timed)
        jit_total = [0.0]
        orig_call = cg.cg_step.__class__.__call__

        def jit_timed(self, *args, **kw):
            t = time.perf_counter()
            try:
                return orig_call(self, *args, **kw)
            finally:
                jit_total[0] += time.perf_counter() - t
        cg.cg_step.__class__.__call__ = jit_timed
        wrapped = loop(cg.cg_step, A, x, r, p, rr, a.iters)
        cg.cg_step.__class__.__call__ = orig_call
        for name, f in orig.items():
            setattr(ex.Executor, name, f)
        entry = cg.cg_step.last
        binding = next(iter(entry.compiled.executor.bindings.values()))
        print(f"{dtype} n={a.n}: kfuse {plain:.1f} us per iteration (torch eager {eager:.1f}); "
              f"launches per call {binding.launch_count}, graphs captured {len(binding.graphs.execs)}", flush=True)
        per = {k: v / a.iters * 1e6 for k, v in spent.items()}
        print(f"   timed parts (wrapped loop {wrapped:.1f} us): jit __call__ {jit_total[0] / a.iters * 1e6:.1f}, "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])), flush=True)


if __name__ == "__main__":
    main()
