"""One strip per block, or one resident wave of blocks walking many strips?  Every strip plan of a
gemv-like script (strips looping along the rows, each (BY, R)), timed with 1, 2, 4 serial
iterations and with one resident wave (``LaunchInfo.one_wave``), beside the strips looping along
the columns (one iteration, the whole row) and the model's first choice, in turns (3 rounds,
median of 30 cold-L2 calls each).

    PYTHONPATH=src python3 docs/experiments/strip_one.py [--quick]
"""
import itertools
import sys
from dataclasses import replace

import numpy as np

import kfuse
from kfuse.ir.kernel import target_blocks
from kfuse.tuning.measure import share_module

from explore_util import timed_in_turns

SCRIPTS = {
    "sgemv": "scalar a, b; matrix A[n, n]; vector x[n], y[n], z[n]; input a, A, x, b, y; "
             "z = gemv(a, A, x, b, y); return z;",
    "gemv": "matrix A[n, n]; vector x[n], z[n]; input A, x; z = gemv(A, x); return z;",
    "gesummv": "scalar a, b; matrix A[n, n], B[n, n]; vector x[n], t[n], y[n]; input a, b, A, B, x; "
               "t = gemv(a, A, x); y = gemv(b, B, x, 1, t); return y;",
}


def strip_plans(c, limit=300):
    seen = {}
    for plan in itertools.islice(c.search.plans(), limit):
        if all(kc.variant.whole for k in plan.kernels for kc in k.calls):
            key = (plan.summary(), plan.kernels[0].loop)
            seen.setdefault(key, plan)
    return seen


def build(name, dtype, n, sms):
    """(programs, labels, dims) of one case: the first choice, then every strip plan's forms."""
    c = kfuse.compile(SCRIPTS[name], dtype=dtype, sizes={"n": n}, tuned=False, name=name)
    dims = {d.id: n for d in c.program.dims}
    progs = [c.with_plan(replace(c.plan, kernels=tuple(replace(k, name=f"{k.name}_f") for k in c.plan.kernels)))]
    labels = ["first choice " + c.plan.summary() + f" loop {c.plan.kernels[0].loop}"]
    for (summary, loop), plan in strip_plans(c).items():
        for it in ((-1, 1, 2, 4) if loop == "i" else (0,)):
            prog = c.with_plan(replace(plan, kernels=tuple(
                replace(k, name=f"{k.name}_{loop}_{len(progs)}", iters=max(it, 0)) for k in plan.kernels)))
            tag = f"I={it or 'auto'}"
            if it == -1:                    # one resident wave of blocks (the rule before)
                L = prog.kernels[0].launch
                along, across = L._split(dims)
                wave = L.one_wave(target_blocks(sms, 2048, L.threads))
                w = max(1, -(-along // (max(1, wave // across) * L.ipb)))
                prog = c.with_plan(replace(prog.plan, kernels=tuple(replace(k, iters=w) for k in prog.plan.kernels)))
                tag = f"one wave (I={w})"
            progs.append(prog)
            labels.append(f"{summary} loop {loop} {tag}")
    return progs, labels, dims


def main() -> None:
    import cupy as cp
    cases = [("sgemv", "float32", 8192), ("gemv", "float32", 8192), ("gesummv", "float32", 8192),
             ("sgemv", "float64", 8192), ("sgemv", "float32", 16384), ("sgemv", "float32", 4096)]
    if "--quick" in sys.argv:
        cases = cases[:2]
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for name, dtype, n in cases:
        progs, labels, dims = build(name, dtype, n, sms)
        share_module(progs, "strip one", dims)
        _, times = timed_in_turns(progs, dims, dtype, 3)
        print(f"{name} {dtype} n={n}", flush=True)
        for label, ts in zip(labels, times):
            print(f"   {np.median(ts):8.1f} us  {label}  (rounds {', '.join(f'{t:.1f}' for t in ts)})", flush=True)
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
