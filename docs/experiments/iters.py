"""Time chosen implementations of an example's kernels with several serial-iteration counts.

    python docs/experiments/iters.py NAME 'IMPLEMENTATION' [...]   (n = 8192, N = 2^26, float32)

For each named implementation (as `describe` prints it) of a kernel of the best partition, every
kernel of the plan gets iters = 1, 2, 4, ..., 128 and auto (0): the data behind the launch
heuristic (how many instances a block walks).
"""
import sys
from dataclasses import replace
from pathlib import Path

import kfuse
from kfuse.reference import device_case
from kfuse.runtime.timing import median_us
from kfuse.tuning.measure import share_module

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)
ITERS = (0, 1, 2, 4, 8, 16, 32, 64, 128)


def main(name, wanted):
    base = kfuse.compile(ROOT / "examples" / f"{name}.kf", tuned=False)
    s, p = base.search, base.program
    size = 8192 if any(v.type == "matrix" for v in p.values) else 2**26
    dims = {d.id: size for d in p.dims}
    dev, _, outs = device_case(p, dims, "float32", 0)
    best = s.best()
    want = {frozenset(kc.call.index for kc in k.calls) for k in best.kernels}
    blocks = next(b for b in s.partitions if set(b) == want)
    cases = []
    for n, b in enumerate(blocks):
        for i, (pred, impl, code) in enumerate(s.ranked[b]):
            d = impl.describe(p)
            if d not in wanted:
                continue
            idx = tuple(i if m == n else 0 for m in range(len(blocks)))
            for it in ITERS:
                plan = s.plan(blocks, idx)
                plan = replace(plan, kernels=tuple(replace(k, name=f"{k.name}_c{len(cases)}", iters=it)
                                                   for k in plan.kernels))
                cases.append((d, it, base.with_plan(plan)))
    share_module([c for _, _, c in cases], "iters", dims)     # one NVRTC compile for all cases
    last = None
    for d, it, c in cases:
        if d != last:
            print(f"{name}: {d}", flush=True)
            last = d
        t = median_us(c.bind(out=outs, **dev), reps=30)
        print(f"   iters {it or 'auto':>4}: {t:8.1f} us", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
