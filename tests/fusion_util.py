"""Shared by the fusion tests: every kernel implementation of an example, grouped per partition."""
import random
from dataclasses import replace

import kfuse
from kfuse.tuning.measure import share_module

SAMPLE = 24     # covering plans per partition beyond which a fixed, seeded sample is taken


def renamed(plan, suffix):
    """``plan`` with ``_<suffix>`` after each kernel's name (plans of one script sharing a module)."""
    return replace(plan, kernels=tuple(replace(k, name=f"{k.name}_{suffix}") for k in plan.kernels))


def covering_programs(path, dtype, sample=SAMPLE, dims=None):
    """Lists of CompiledScripts (one list per partition of the plan space) sharing one CUDA module,
    which holds the kernels of all of them (with ``dims``, on a GPU: built for their block orders
    at those sizes).  Together they use every implementation of every kernel;
    where a partition has more than `sample` covering plans, its best plan and a fixed, seeded
    sample of the others."""
    base = kfuse.compile(path, dtype=dtype, tuned=False)
    every: dict[int, list] = {}
    for pid, plan in base.search.covering_plans():
        every.setdefault(pid, []).append(plan)
    rng = random.Random(f"{path.stem}-{dtype}")
    out = []
    for plans in every.values():
        keep = plans if len(plans) <= sample else [plans[0]] + rng.sample(plans[1:], sample - 1)
        progs = []
        for m, plan in enumerate(keep):
            progs.append(base.with_plan(renamed(plan, f"v{m}")))
        _, progs = share_module(progs, f"implementations of {base.program.name}", dims)   # one NVRTC compile
        out.append(progs)
    return out
