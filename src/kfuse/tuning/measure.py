"""Measuring candidate plans on the GPU: compiled together (one NVRTC module), each checked
against the float64 reference on random inputs, the correct ones timed with CUDA events."""
from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np

from ..codegen.module import module_source
from ..reference import device_case, evaluate, relative_error
from ..progress import Progress
from ..runtime.gpu import cupy
from ..runtime.launch import pdl_available
from ..runtime.order import launch_orders, order_defines
from ..runtime.timing import median_us

TOL = {"float32": 1e-5, "float64": 1e-12}

def share_module(progs: list, title: str, dims: dict[int, int] | None = None) -> str:
    """Give programs of one script (plans with distinct kernel names) one CUDA module holding all
    their kernels: one NVRTC compile instead of one each.  With ``dims`` (on a GPU) each program's
    block orders at those sizes are built in (runtime/order.py); a program bound at other sizes
    whose orders differ compiles its own module."""
    base = progs[0]
    source = module_source([k for p in progs for k in p.kernels], base.library, base.dtype, title=title)
    if dims is not None:
        device = cupy().cuda.Device().id
        source = "".join(order_defines(p.kernels, launch_orders(p, dims, device, pdl_available(device)))
                         for p in progs) + source
    for p in progs:
        p.share_source(source)
    return source


def measure_plans(compiled, plans, dims: dict[int, int], reps: int = 30, log=None, label: str = "tune"):
    """Compile plans (one NVRTC compile for all), check each against the float64 reference on
    random inputs of sizes ``dims``, time the correct ones (CUDA events, median of ``reps``).

    Returns ([(microseconds, index in plans, compiled program)] for the correct plans, seconds the
    compile took)."""
    cp = cupy()
    log = log or logging.getLogger("kfuse").info
    prog = compiled.program
    t0 = time.perf_counter()
    candidates = []
    for n, plan in enumerate(plans):
        plan = replace(plan, kernels=tuple(replace(k, name=f"{k.name}_t{n}") for k in plan.kernels))
        candidates.append(compiled.with_plan(plan))
    share_module(candidates, f"tuning candidates of {prog.name}", dims)
    device = cp.cuda.Device().id
    candidates[0].functions(device, launch_orders(candidates[0], dims, device, pdl_available(device)))
    compile_s = time.perf_counter() - t0
    log(f"{label} {prog.name}: {len(candidates)} plan(s) compiled in {compile_s:.1f} s; sizes "
        + ", ".join(f"{d.name}={dims[d.id]}" for d in prog.dims))
    dev, host, outs = device_case(prog, dims, compiled.dtype, 0)
    ref, mag = evaluate(prog, host), evaluate(prog, host, magnitude=True)
    results = []
    bar = Progress(f"{label}: measuring plans", len(candidates), log)
    for n, c in enumerate(candidates):
        bar.step()
        for o in outs.values():
            o.fill(np.nan)                      # poisoned again for every candidate
        got = c(out=outs, sync=True, **dev)
        got = got if isinstance(got, tuple) else (got,)
        err = max(relative_error(cp.asnumpy(g), ref[v.id], mag[v.id]) for v, g in zip(prog.outputs, got))
        if not err < TOL[compiled.dtype]:
            log(f"  plan {n + 1:3d}: WRONG (error {err:.1e}), skipped")
            continue
        t = median_us(c.bind(**dev), reps=reps, cold_l2=True)      # kfuse's own outputs, as without out=
        results.append((t, n, c))
        log(f"  plan {n + 1:3d}: {t:9.1f} us (predicted {plans[n].predicted * 1e6:.1f})")
    bar.close()
    return results, compile_s
