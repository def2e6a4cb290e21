"""The empirical search (GPU): the model's top plans measured, then kernel by kernel and serial
iterations; the fastest kept and remembered in the tuning store."""
from __future__ import annotations

import itertools
import logging
import time
from dataclasses import replace


from ..errors import KfuseError
from ..runtime.gpu import gpu_name
from .measure import measure_plans
from .store import TuningStore, store_key

_log = logging.getLogger("kfuse")
ITERS = (1, 2, 4, 8, 16, 32)    # serial iterations tried for each kernel of the best plan


def search_dims(compiled, sizes=None) -> dict[int, int]:
    """The model's sizes, with the script sizes named in ``sizes`` replaced."""
    dims = dict(compiled.search.dims)
    for d in compiled.program.dims:
        if sizes and d.name in sizes:
            dims[d.id] = int(sizes[d.name])
    return dims


def _replace_kernels(compiled, plan, best_us: float, dims, reps: int, alternatives, label: str):
    """Kernels run one after another, so their times add: measure the plan with each alternative
    (kernel index, KernelSpec) in place of its kernel, take the fastest that beats ``best_us`` for
    each kernel, and measure their combination again.  Returns (chosen: kernel -> spec, the
    combined plan, its time), or ({}, plan, best_us) when no alternative was faster."""
    variants = [replace(plan, kernels=tuple(alt if m == k else s for m, s in enumerate(plan.kernels)))
                for k, alt in alternatives]
    results, _ = measure_plans(compiled, variants, dims, reps=reps, log=lambda m: None, label=label)
    chosen = {}
    for t, n, _ in sorted(results, key=lambda r: r[0]):
        k, alt = alternatives[n]
        if t < best_us and k not in chosen:
            chosen[k] = alt
    if not chosen:
        return chosen, plan, best_us
    combined = replace(plan, kernels=tuple(chosen.get(k, s) for k, s in enumerate(plan.kernels)))
    again, _ = measure_plans(compiled, [combined], dims, reps=reps, log=lambda m: None, label=label)
    return chosen, combined, again[0][0] if again else float("inf")


def _tune_iterations(compiled, plan, best_us: float, dims, reps: int, log):
    """Serial iterations of the best plan, kernel by kernel: each kernel's launch-time choice
    against explicit counts; the combination of the fastest is kept only when it beats the plan."""
    prog = compiled.program
    alternatives = [(k, replace(spec, iters=it)) for k, spec in enumerate(plan.kernels) if not spec.iters
                    for it in ITERS]
    if not alternatives:
        return plan, best_us
    chosen, combined, t = _replace_kernels(compiled, plan, best_us, dims, reps, alternatives, "iterations")
    counts = {k: spec.iters for k, spec in sorted(chosen.items())}
    if not chosen:
        log(f"tune {prog.name}: serial iterations chosen at launch stay (no explicit count was faster)")
        return plan, best_us
    if t >= best_us:
        log(f"tune {prog.name}: serial iterations chosen at launch stay ({t:.1f} us with "
            f"{counts}, {best_us:.1f} without)")
        return plan, best_us
    log(f"tune {prog.name}: serial iterations " + ", ".join(f"kernel {k}: {it}" for k, it in counts.items())
        + f": {t:.1f} us (was {best_us:.1f})")
    return combined, t


def _tune_kernels(compiled, plan, best_us: float, dims, reps: int, per_kernel: int, log):
    """Implementations of each kernel of the best plan, one kernel at a time (the others as they
    are): the model's ``per_kernel`` best of that kernel's fusion.  The plan search ranks whole
    plans, so its top plans of a several-kernel script vary mostly the kernel the model finds
    closest between alternatives; this step measures the others' alternatives too.  The fastest
    implementation of each kernel is combined and kept only when the combination beats the plan."""
    prog, search = compiled.program, compiled.search
    alternatives = []
    for k, spec in enumerate(plan.kernels):
        calls = frozenset(kc.call.index for kc in spec.calls)
        for _, impl, _ in search.ranked.get(calls, [])[:per_kernel]:
            alt = impl.spec(prog, spec.name, spec.stores)
            if alt != replace(spec, iters=0):
                alternatives.append((k, alt))
    if not alternatives:
        return plan, best_us
    chosen, combined, t = _replace_kernels(compiled, plan, best_us, dims, reps, alternatives, "kernels")
    if not chosen:
        log(f"tune {prog.name}: kernel by kernel, {len(alternatives)} alternatives: none faster")
        return plan, best_us
    if t >= best_us:
        log(f"tune {prog.name}: kernel by kernel, the combination of the fastest measured {t:.1f} us "
            f"against {best_us:.1f}: the plan stays")
        return plan, best_us
    log(f"tune {prog.name}: kernel by kernel ({len(alternatives)} alternatives): kernel(s) "
        + ", ".join(str(k) for k in sorted(chosen)) + f" replaced: {t:.1f} us (was {best_us:.1f})")
    return combined, t


def tune(compiled, top: int = 20, sizes=None, reps: int = 30, store=True, log=None, iterations: bool = True):
    log = log or _log.info
    search = compiled.search
    if search is None:
        raise KfuseError("tune needs a fused compile (fuse=True): it searches the ranked plans")
    dims = search_dims(compiled, sizes)
    # sizes of another size class: search that class's ranking (the plans ranked at the compile's
    # sizes would not be those the model prefers at ``dims``); a pinned program is its own
    compiled = compiled.for_sizes(dims)
    search = compiled.search
    prog = compiled.program
    t0 = time.perf_counter()
    plans = list(itertools.islice(search.plans(), top))
    results, _ = measure_plans(compiled, plans, dims, reps=reps, log=log)
    if not results:
        raise KfuseError(f"tune {prog.name}: no candidate plan gave a correct result")
    t, n, best = min(results, key=lambda r: r[0])
    first = next(r[0] for r in results if r[1] == 0) if any(r[1] == 0 for r in results) else float("nan")
    log(f"tune {prog.name}: best is plan {n + 1} at {t:.1f} us (first choice {first:.1f} us, "
        f"{100 * t / first:.1f}%); search took {time.perf_counter() - t0:.1f} s")
    plan = replace(best.plan, kernels=tuple(replace(k, name=k.name.rsplit("_t", 1)[0]) for k in best.plan.kernels))
    if len(plan.kernels) > 1:
        plan, t = _tune_kernels(compiled, plan, t, dims, reps, top, log)
    if iterations:
        plan, t = _tune_iterations(compiled, plan, t, dims, reps, log)
    info = {"time_us": round(t, 3), "rank": n + 1, "first_us": round(first, 3), "candidates": len(plans),
            "stored": None}
    if store is not False:
        st = store if isinstance(store, TuningStore) else TuningStore(None if store is True else store,
                                                                     warn=_log.warning)
        gpu = gpu_name() or "unknown GPU"
        try:
            st.append(store_key(prog, gpu, compiled.dtype, dims), plan, t,
                      {"rank": n + 1, "first_us": round(first, 3), "candidates": len(plans)})
        except (OSError, KfuseError) as e:      # the search is done: keep its winner, say why it is not stored
            reason = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.strerror else str(e)
            info["not_stored"] = reason
            _log.warning(f"tune {prog.name}: the winner ({t:.1f} us) was not remembered in {st.path}: {reason}")
        else:
            info["stored"] = str(st.path)
            log(f"tune {prog.name}: remembered in {st.path}")
    return replace(compiled.with_plan(plan), tuning=info)
