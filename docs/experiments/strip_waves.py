"""Serial iterations of a strip gemv: one resident wave (kfuse's rule, `LaunchInfo.one_wave`) or
more, shorter blocks?

The one-wave grid came from the hand-written one-pass ATAX, whose every block adds a whole row of
column partials when its loop ends (fewer, longer blocks add fewer).  A strip kernel with no
column partials (a gemv alone: SGEMV, GESUMMV, CG's q = A p) adds nothing at the end; its tail
(the last strips of the wave's blocks) may cost more than the invariant loads that more blocks
repeat.  For the model's best strip plan of SGEMV and GESUMMV, at several n and both dtypes, the
strip kernel timed with automatic iterations and with explicit counts, in turns (3 rounds, median
of 30 cold-L2 calls each), beside the model's first choice and torch.compile.

    PYTHONPATH=src python3 docs/experiments/strip_waves.py
"""
import itertools
from dataclasses import replace

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer, examples_dir
from kfuse.ir.kernel import target_blocks
from kfuse.runtime.timing import quartiles_us
from kfuse.tuning.measure import share_module

from explore_util import timed_in_turns

ITERS = (0, 1, 2, 4, 8, 16, 32, 64)


def strip_plan(c, limit=400):
    for plan in itertools.islice(c.search.plans(), limit):
        if any(kc.variant.whole for k in plan.kernels for kc in k.calls):
            return plan
    return None


def main() -> None:
    import cupy as cp
    timer = device_timer(reps=30, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s (read + write)", flush=True)
    dev_attr = cp.cuda.Device().attributes
    sms = dev_attr["MultiProcessorCount"]
    for name, dtype, n in (("sgemv", "float32", 4096), ("sgemv", "float32", 8192), ("sgemv", "float32", 16384),
                           ("gesummv", "float32", 8192), ("sgemv", "float64", 4096), ("sgemv", "float64", 8192),
                           ("gesummv", "float64", 8192)):
        text = (examples_dir() / f"{name}.kf").read_text()
        names = [d.name for d in kfuse.compile(text, dtype=dtype, tuned=False, name=name).program.dims]
        c = kfuse.compile(text, dtype=dtype, sizes={d: n for d in names}, tuned=False, name=name)
        dims = {d.id: n for d in c.program.dims}
        plan = strip_plan(c)
        if plan is None:
            print(f"{name} {dtype} n={n}: no strip plan in the first 400", flush=True)
            continue
        cases = [("first choice", c.with_plan(replace(c.plan, kernels=tuple(
            replace(k, name=f"{k.name}_f") for k in c.plan.kernels))))]
        for it in ITERS:
            p = replace(plan, kernels=tuple(replace(k, name=f"{k.name}_i{it}", iters=(it if any(
                kc.variant.whole for kc in k.calls) else k.iters)) for k in plan.kernels))
            cases.append((f"strip I={it or 'auto'}", c.with_plan(p)))
        share_module([x for _, x in cases], "strip waves", dims)
        strip_k = next(k for k in cases[1][1].kernels if k.launch.whole_entries)
        L = strip_k.launch
        auto = L.iterations(dims, target_blocks(sms, 2048, L.threads))
        dev, times = timed_in_turns([x for _, x in cases], dims, dtype, 3)
        import torch
        A = torch.as_tensor(next(v for v in dev.values() if getattr(v, "ndim", 0) == 2), device="cuda")
        x = torch.rand(n, device="cuda", dtype=A.dtype)
        mv = torch.compile(lambda a, v: a @ v)
        mv(A, x)
        t_torch = quartiles_us(lambda: mv(A, x), reps=30, warmup=3, cold_l2=True).median
        print(f"{name} {dtype} n={n}: strip plan {plan.summary()} (auto iterations {auto}, "
              f"grid {L.grid(dims, auto)}); torch.compile A @ x {t_torch:.1f} us", flush=True)
        for (label, _), ts in zip(cases, times):
            print(f"   {label:16s} {np.median(ts):8.1f} us  (rounds {', '.join(f'{t:.1f}' for t in ts)})", flush=True)
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
