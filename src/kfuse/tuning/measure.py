"""Measuring candidate plans on the GPU: compiled together (a few NVRTC modules, compiled side by
side, each kernel that several candidates share built once), each checked against the float64
reference on random inputs, the correct ones timed with CUDA events."""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from ..codegen.module import module_source
from ..reference import device_case, evaluate
from ..progress import Progress
from ..runtime.gpu import cupy
from ..runtime.launch import pdl_available
from ..runtime.order import launch_orders, order_defines, with_orders
from ..runtime.timing import median_us

TOL = {"float32": 1e-5, "float64": 1e-12}

def share_module(progs: list, title: str, dims: dict[int, int] | None = None) -> tuple[str, list]:
    """Programs of one script (plans with distinct kernel names) sharing one CUDA module that holds
    all their kernels: one NVRTC compile instead of one each.  Returns (the module, the programs
    that share it: new compiled scripts, ``CompiledScript.share_source``).  With ``dims`` (on a GPU) each program's
    block orders at those sizes are built in (runtime/order.py); a program bound at other sizes
    whose orders differ compiles its own module."""
    base = progs[0]
    kernels = {k.launch.kernel: k for p in progs for k in p.kernels}     # one kernel of several programs: once
    source = module_source(list(kernels.values()), base.library, base.dtype, title=title)
    if dims is not None:
        device = cupy().cuda.Device().id
        pdl = pdl_available(device)
        source = with_orders(source, "".join(dict.fromkeys(line for p in progs for line in order_defines(
            p.kernels, launch_orders(p.artifact, dims, device, pdl)).splitlines(keepends=True))))
    return source, [p.share_source(source) for p in progs]


#: at most this many NVRTC compiles run at once (NVRTC compiles one module on one core)
COMPILE_THREADS = 8


def candidates_for(compiled, plans, dims: dict[int, int], device: int, pdl: bool) -> list:
    """Programs for ``plans``, their kernels named apart (``_t<n>``) so that they can share a
    module -- except that a kernel several plans build alike (the same code but for its name, the
    same block order at ``dims``) has one name in all of them, so that it is compiled once."""
    def renamed(plan, names):
        return replace(plan, kernels=tuple(replace(k, name=nm) for k, nm in zip(plan.kernels, names)))

    names: dict[tuple[str, int], str] = {}
    out = []
    for n, plan in enumerate(plans):
        own = [f"{k.name}_t{n}" for k in plan.kernels]
        first = compiled.with_plan(renamed(plan, own))
        orders = launch_orders(first.artifact, dims, device, pdl)
        chosen = [names.setdefault((code.source.replace(name, "@"), order), name)
                  for name, code, order in zip(own, first.kernels, orders)]
        out.append(first if chosen == own else compiled.with_plan(renamed(plan, chosen)))
    return out


def compile_candidates(candidates: list, title: str, dims: dict[int, int], device: int, pdl: bool
                       ) -> tuple[list, list[float]]:
    """Share modules among the candidates (consecutive groups, one per compile thread, each module
    holding its group's kernels once) and compile the modules side by side: (the candidates that
    share them, in order; the seconds each module took)."""
    threads = max(1, min(COMPILE_THREADS, os.cpu_count() or 1, len(candidates)))
    size = -(-len(candidates) // threads)
    groups = [share_module(candidates[k:k + size], title, dims)[1] for k in range(0, len(candidates), size)]

    def build(c) -> float:
        t0 = time.perf_counter()
        with cupy().cuda.Device(device):
            c.calls.functions(device, launch_orders(c.artifact, dims, device, pdl))
        return time.perf_counter() - t0
    with ThreadPoolExecutor(len(groups)) as pool:
        return [c for g in groups for c in g], list(pool.map(build, [g[0] for g in groups]))


def _error_on_device(cp, got, ref, denom: float) -> float:
    """reference.relative_error, computed where the arrays are: ||got - ref|| / denom, inf for
    a NaN or infinity anywhere (an unwritten element) or a shape other than the reference's."""
    got = cp.asarray(got, dtype=cp.float64)
    if got.shape != ref.shape or not bool(cp.isfinite(got).all()):
        return float("inf")
    return float(cp.linalg.norm(got - ref)) / denom


def measure_plans(compiled, plans, dims: dict[int, int], reps: int = 30, log=None, label: str = "tune"):
    """Compile plans (a few NVRTC compiles side by side, shared kernels once), check each against
    the float64 reference on random inputs of sizes ``dims``, time the correct ones (CUDA events,
    median of ``reps``).

    Returns ([(microseconds, index in plans, compiled program)] for the correct plans, seconds the
    compile took)."""
    cp = cupy()
    log = log or logging.getLogger("kfuse").info
    prog = compiled.program
    t0 = time.perf_counter()
    device = cp.cuda.Device().id
    pdl = pdl_available(device)
    candidates = candidates_for(compiled, plans, dims, device, pdl)
    candidates, each = compile_candidates(candidates, f"tuning candidates of {prog.name}", dims, device, pdl)
    compile_s = time.perf_counter() - t0
    log(f"{label} {prog.name}: {len(candidates)} plan(s) compiled in {compile_s:.1f} s "
        f"({len(each)} modules side by side, {max(each):.1f} s the longest); sizes "
        + ", ".join(f"{d.name}={dims[d.id]}" for d in prog.dims))
    dev, host, outs = device_case(prog, dims, compiled.dtype, 0)
    ref, mag = evaluate(prog, host), evaluate(prog, host, magnitude=True)
    # the reference on the device, once: a check then costs no copy of a matrix to the host
    want = {v.id: (cp.asarray(ref[v.id]), float(np.linalg.norm(mag[v.id])) or 1.0) for v in prog.outputs}
    results = []
    bar = Progress(f"{label}: measuring plans", len(candidates), log)
    for n, c in enumerate(candidates):
        bar.step()
        for o in outs.values():
            o.fill(np.nan)                      # poisoned again for every candidate
        got = c.calls.outputs(out=outs, sync=True, **dev)
        got = got if isinstance(got, tuple) else (got,)
        err = max(_error_on_device(cp, g, *want[v.id]) for v, g in zip(prog.outputs, got))
        if not err < TOL[compiled.dtype]:
            log(f"  plan {n + 1:3d}: WRONG (error {err:.1e}), skipped")
            c.calls.release()
            continue
        t = median_us(c.bind(**dev), reps=reps, cold_l2=True)      # kfuse's own outputs, as without out=
        c.calls.release()
        results.append((t, n, c))
        log(f"  plan {n + 1:3d}: {t:9.1f} us (predicted {plans[n].predicted * 1e6:.1f})")
    bar.close()
    return results, compile_s


def retime(compiled, plans, dims: dict[int, int], reps: int = 20, rounds: int = 5) -> list[float]:
    """Time ``plans`` again, interleaved: ``rounds`` rounds, each timing every plan once (median of
    ``reps`` CUDA-event timings, L2 flushed); each plan's median over the rounds, in microseconds.

    The best of many candidates timed once each is biased low (the candidate whose timing happened
    to fall low wins); timing the winner and another plan again, in turns, compares them without
    that bias and without the drift of the GPU's clocks between the two."""
    cp = cupy()
    device = cp.cuda.Device().id
    pdl = pdl_available(device)
    candidates = candidates_for(compiled, plans, dims, device, pdl)
    candidates, _ = compile_candidates(candidates, f"re-timed plans of {compiled.program.name}", dims, device, pdl)
    dev, _, _ = device_case(compiled.program, dims, compiled.dtype, 1)
    bound = [c.bind(**dev) for c in candidates]
    times: list[list[float]] = [[] for _ in candidates]
    for _ in range(rounds):
        for k, b in enumerate(bound):
            times[k].append(median_us(b, reps=reps, cold_l2=True))
    for c in candidates:
        c.calls.release()
    return [sorted(t)[len(t) // 2] for t in times]
