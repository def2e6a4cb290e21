"""What the exploration scripts (atomics_cost, rotate_explore, span_explore, hints) share: an
example's model-ranked top plans at the benchmark sizes (with other spans if asked), built into
one module (edited if asked), and the check of one against the float64 reference; and the host
time per call of the call-path scripts (call_path_costs, call_path_profile, jit_call_profile)."""
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import kfuse
from kfuse.fusion.plans import PlanSearch
from kfuse.reference import device_case, evaluate, relative_error
from kfuse.tuning.measure import share_module
from kfuse.tuning.search import search_dims

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)


def top_plans(seq: str, top: int, n: int = 8192, N: int = 2**26, spans: tuple[int, ...] | None = None):
    """(compiled script, its sizes, the model's first ``top`` plans) of examples/SEQ.kf, sized n
    (scripts with a matrix) or N.  ``spans``: rank the plans of a space whose nested kernels take
    these spans instead of kfuse's (``PlanSearch(spans=...)``, same model)."""
    c = kfuse.compile(ROOT / "examples" / f"{seq}.kf", tuned=False)
    p = c.program
    size = n if any(x.type == "matrix" for x in p.values) else N
    dims = search_dims(c, {d.name: size for d in p.dims})
    search = c.search
    if spans is not None:
        search = PlanSearch(p, c.library, itemsize=np.dtype(c.dtype).itemsize, model=c.search.model,
                            spans=tuple(spans))
    return c, dims, [pl for _, pl in zip(range(top), search.plans())]


def candidates(c, plans, dims, title: str, edit=None):
    """The plans as programs sharing one NVRTC module (kernels renamed apart), and a fresh random
    case for them: (programs, (device inputs, host inputs, output arrays)).  ``edit``: a function
    of the module's CUDA text returning the text actually compiled (``CompiledScript.share_source``)."""
    cands = [c.with_plan(replace(pl, kernels=tuple(replace(k, name=f"{k.name}_t{n}") for k in pl.kernels)))
             for n, pl in enumerate(plans)]
    source = share_module(cands, title, dims)
    if edit is not None:
        source = edit(source)
        for x in cands:
            x.share_source(source)
    return cands, device_case(c.program, dims, "float32", 0)


def max_error(x, case) -> float:
    """Largest relative error of program ``x``'s outputs (poisoned with NaN first) on ``case``."""
    import cupy as cp
    dev, host, outs = case
    p = x.program
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    for o in outs.values():
        o.fill(np.nan)
    got = x(out=outs, sync=True, **dev)
    got = got if isinstance(got, tuple) else (got,)
    return max(relative_error(cp.asnumpy(g), ref[v.id], mag[v.id]) for v, g in zip(p.outputs, got))


def describe(plan) -> str:
    """Each kernel's loop axis, span, unroll and variants with BY, e.g. ``i S2 U1 quad4/quad4``."""
    return "; ".join(f"{k.loop} S{k.span} U{k.unroll} "
                     + "/".join(f"{kc.variant.name}{dict(kc.macros).get('BY', '')}" for kc in k.calls)
                     for k in plan.kernels)


def torch_cg_step(A, x, r, p, rr):
    """One CG step in torch (mv, dot, elementwise updates; the scalars stay 0-d tensors), the peer
    of examples/solvers/cg.py's cg_step in alternate_calls.py and cg_step_large.py."""
    import torch
    q = torch.mv(A, p)
    alpha = rr / torch.dot(p, q)
    x = x + alpha * p
    r = r - alpha * q
    rr_new = torch.dot(r, r)
    return x, r, r + (rr_new / rr) * p, rr_new


def timed_in_turns(progs, dims, dtype: str, rounds: int, reps: int = 30):
    """Programs of one script bound on one fresh random case and timed in turns, ``rounds`` times
    (median of ``reps`` cold-L2 CUDA-event timings each): (the case's device inputs, each
    program's list of round medians in us)."""
    from kfuse.runtime.timing import quartiles_us
    dev, _host, outs = device_case(progs[0].program, dims, dtype, 0)
    bound = [p.bind(out=outs, **dev) for p in progs]
    for b in bound:
        b(sync=True)
    got: list[list[float]] = [[] for _ in progs]
    for _ in range(rounds):
        for n, b in enumerate(bound):
            got[n].append(quartiles_us(b, reps=reps, warmup=3, cold_l2=True).median)
    return dev, got


def host_us_per_call(fn, n: int = 3000) -> float:
    """Microseconds per call of ``fn`` called ``n`` times back to back (after 50 unmeasured
    calls), the device synchronised before and after: the host's time where it is the bound."""
    import cupy as cp
    for _ in range(50):
        fn()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / n * 1e6
