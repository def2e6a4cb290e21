"""Time every implementation of every kernel of each example's best partition (n=8192, N=2^26).

Prints, per kernel, the implementations ranked by measured time next to the model's rank: the
data that tells which choices the model cannot see (unroll, BY, variants).

    python docs/experiments/sweep.py [NAME ...]
"""
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import kfuse
from kfuse.reference import device_case
from kfuse.runtime.gpu import cupy
from kfuse.runtime.timing import median_us
from kfuse.tuning.measure import share_module

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)


def main(names):
    cp = cupy()
    src = cp.empty(2**28, dtype=np.float32)
    dst = cp.empty_like(src)
    t = median_us(lambda: cp.copyto(dst, src), reps=20)
    print(f"copy bandwidth: {2 * src.nbytes / (t * 1e-6) / 1e9:.0f} GB/s (read + write)", flush=True)
    del src, dst
    for name in names:
        base = kfuse.compile(ROOT / "examples" / f"{name}.kf", tuned=False)
        s = base.search
        p = base.program
        size = 8192 if any(v.type == "matrix" for v in p.values) else 2**26
        dims = {d.id: size for d in p.dims}
        dev, _, outs = device_case(p, dims, "float32", 0)
        best_plan = s.best()
        want = {frozenset(kc.call.index for kc in k.calls) for k in best_plan.kernels}
        blocks = next(b for b in s.partitions if set(b) == want)
        for n, b in enumerate(blocks):
            results = []
            progs = []
            for i, (pred, impl, code) in enumerate(s.ranked[b]):
                idx = tuple(i if m == n else 0 for m in range(len(blocks)))
                plan = s.plan(blocks, idx)
                plan = replace(plan, kernels=tuple(replace(k, name=f"{k.name}_s{i}") for k in plan.kernels))
                progs.append(base.with_plan(plan))
            share_module(progs, "sweep", dims)                  # one NVRTC compile for the kernel's sweep
            for i, (pred, impl, code) in enumerate(s.ranked[b]):
                prog = progs[i]
                bound = prog.bind(out=outs, **dev)
                t = median_us(bound, reps=30)
                results.append((t, i, pred * 1e6, impl.describe(p)))
            results.sort()
            print(f"{name} kernel {n} ({len(results)} implementations): measured best first "
                  "[time us, model rank, predicted us, implementation]")
            for t, i, pred, d in results[:10]:
                print(f"   {t:8.1f}  #{i:<3d} {pred:8.1f}  {d}")
            worst = results[-1]
            print(f"   worst {worst[0]:8.1f}  #{worst[1]:<3d} {worst[3]};  model's first: "
                  f"{next(r[0] for r in results if r[1] == 0):.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["sscal", "vadd", "waxpby", "axpydot", "bicgk", "sgemv", "madd", "gemver", "gesummv", "atax"])
