"""Time every implementation of an example's best partition, in a given dtype, with several
serial-iteration counts (n = 8192, N = 2^26, every call after a read of 4 x L2).

    python docs/experiments/map_sweep.py DTYPE ITERS NAME [NAME ...]
    (ITERS: comma-separated, 0 = the launch heuristic's choice; e.g. 0,1,2,4,8)

The data behind the float64 map plans (SSCAL, VADD, WAXPBY losing to torch.compile at 88 %, 89 %
and 75 % of the copy bandwidth): which variant, instances per block, unroll and serial iterations
a map wants, against the model's rank.
"""
import sys
from dataclasses import replace
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.reference import device_case
from kfuse.runtime.timing import median_us
from kfuse.tuning.measure import share_module

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)


def main(dtype, iters, names):
    timer = device_timer(reps=30, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s (read + write)", flush=True)
    for name in names:
        base = kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dtype, tuned=False)
        s, p = base.search, base.program
        size = 8192 if any(v.type == "matrix" for v in p.values) else 2**26
        dims = {d.id: size for d in p.dims}
        dev, _, outs = device_case(p, dims, dtype, 0)
        best_plan = s.best()
        want = {frozenset(kc.call.index for kc in k.calls) for k in best_plan.kernels}
        blocks = next(b for b in s.partitions if set(b) == want)
        for n, b in enumerate(blocks):
            cases = []
            for i, (pred, impl, code) in enumerate(s.ranked[b]):
                idx = tuple(i if m == n else 0 for m in range(len(blocks)))
                for it in iters:
                    plan = s.plan(blocks, idx)
                    plan = replace(plan, kernels=tuple(replace(k, name=f"{k.name}_s{len(cases)}", iters=it)
                                                       for k in plan.kernels))
                    cases.append((i, it, pred * 1e6, impl.describe(p), base.with_plan(plan)))
            share_module([c[-1] for c in cases], "sweep", dims)
            results = []
            for i, it, pred, d, prog in cases:
                t = timer(prog.bind(out=outs, **dev))[1]
                results.append((t, i, it, pred, d))
                prog.release()
            results.sort()
            first = min(r[0] for r in results if r[1] == 0 and r[2] == 0)
            print(f"{name} {dtype} kernel {n} ({len(results)} cases): measured best first "
                  "[time us, model rank, iters, predicted us, implementation]")
            for t, i, it, pred, d in results[:12]:
                print(f"   {t:8.1f}  #{i:<3d} I{it or 'auto':<5} {pred:8.1f}  {d}")
            print(f"   model's first (auto iters): {first:.1f} us; worst {results[-1][0]:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], [int(x) for x in sys.argv[2].split(",")], sys.argv[3:])
