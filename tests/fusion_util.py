"""Shared by the fusion tests: every kernel implementation of an example, grouped per partition."""
from dataclasses import replace

import kfuse
from kfuse.codegen.module import module_source


def covering_programs(path, dtype):
    """Lists of CompiledScripts (one list per partition of the plan space) sharing one CUDA module,
    which holds the kernels of all of them; together they use every implementation of every kernel."""
    base = kfuse.compile(path, dtype=dtype)
    groups: dict[int, list] = {}
    for pid, plan in base.search.covering_plans():
        m = len(groups.setdefault(pid, []))
        plan = replace(plan, kernels=tuple(replace(k, name=f"{k.name}_v{m}") for k in plan.kernels))
        groups[pid].append(base.with_plan(plan))
    out = []
    for progs in groups.values():
        source = module_source([k for p in progs for k in p.kernels], base.library, dtype,
                               title=f"every implementation of {base.program.name}")
        for p in progs:
            p.__dict__["cuda_source"] = source      # one NVRTC compile per partition
        out.append(progs)
    return out
