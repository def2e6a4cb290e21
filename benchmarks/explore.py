"""Explore implementation choices (loop axis, unroll, BY, variants, hand fusions) on the GPU.

Each line: the choice, the relative error against float64 NumPy, time, and % of copy bandwidth.
"""
from dataclasses import replace
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
from kfuse.compiled import CompiledScript
from kfuse.ir.kernel import KernelCall, KernelSpec
from kfuse.codegen.kernel import build_kernel
from kfuse.ir.plan import Plan
from kfuse.reference import evaluate, random_inputs, relative_error
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parent.parent


def copy_bw():
    src = cp.empty(2**28, dtype=np.float32)
    dst = cp.empty_like(src)
    t = median_us(lambda: cp.copyto(dst, src), reps=30)
    return 2 * src.nbytes / (t * 1e-6) / 1e9


def with_specs(base, specs):
    return CompiledScript(base.program, base.library, base.dtype, Plan(base.program, tuple(specs)),
                          [build_kernel(s, base.library) for s in specs])


def modified(base, **changes):
    return with_specs(base, [replace(k, **changes) for k in base.plan.kernels])


def fused(base, loop="i", by=8, variants=None, unroll=1, iters=0):
    """All calls of the program in one kernel."""
    calls = []
    for n, c in enumerate(base.program.calls):
        var = c.function.variants[variants[n] if variants else 0]
        macros = tuple((m, by if by in vals else vals[0]) for m, vals in var.macros.items())
        calls.append(KernelCall(c, var, macros))
    returned = {v.id for v in base.program.outputs}
    return with_specs(base, [KernelSpec("kf", tuple(calls), loop=loop, unroll=unroll, iters=iters,
                                        ipb=8 if base.program.calls[0].function.nesting == 1 else 1,
                                        stores=frozenset(returned))])


def main():
    bw = copy_bw()
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    cases = {
        "sscal": (2**26, [("default", lambda b: b)] + [(f"U={u} ipb={p}", lambda b, u=u, p=p: modified(b, unroll=u, ipb=p))
                                                       for u in (2, 4, 8) for p in (4, 8)]),
        "madd": (8192, [("default", lambda b: b)] + [(f"U={u} BY={by}", lambda b, u=u, by=by: modified(
            b, unroll=u, calls=tuple(replace(kc, macros=(("BY", by),)) for kc in b.plan.kernels[0].calls)))
            for u in (1, 2, 4) for by in (4, 8, 16)]),
        "sgemv": (8192, [("default(loop j)", lambda b: b), ("loop i", lambda b: modified(b, loop="i"))]
                  + [(f"loop j U={u} BY={by}", lambda b, u=u, by=by: modified(
                      b, unroll=u, calls=tuple(replace(kc, macros=(("BY", by),)) for kc in b.plan.kernels[0].calls)))
                     for u in (1, 2, 4) for by in (4, 8, 16)]),
        "atax": (8192, [("default", lambda b: b), ("U=2", lambda b: modified(b, unroll=2)),
                        ("U=4", lambda b: modified(b, unroll=4))]),
        "bicgk": (8192, [("unfused", lambda b: b)]
                  + [(f"fused loop {lp} BY={by} U={u}", lambda b, lp=lp, by=by, u=u: fused(b, lp, by, unroll=u))
                     for lp in ("i", "j") for by in (4, 8, 16) for u in (1, 2)]
                  + [("fused loop j gemtv smem BY=8", lambda b: fused(b, "j", 8, variants=[0, 1])),
                     ("fused loop j gemtv smem BY=4", lambda b: fused(b, "j", 4, variants=[0, 1]))]),
        "gemver": (8192, [("unfused", lambda b: b)]),
        "gesummv": (8192, [("unfused", lambda b: b), ("fused loop i", lambda b: fused(b, "i")),
                           ("fused loop i U=2", lambda b: fused(b, "i", unroll=2))]),
        "axpydot": (2**26, [("unfused", lambda b: b), ("fused", lambda b: fused(b)),
                            ("fused U=4", lambda b: fused(b, unroll=4))]),
        "vadd": (2**26, [("unfused", lambda b: b), ("fused", lambda b: fused(b)),
                         ("fused U=4", lambda b: fused(b, unroll=4))]),
        "waxpby": (2**26, [("unfused", lambda b: b), ("fused U=4", lambda b: fused(b, unroll=4))]),
    }
    for name, (size, choices) in cases.items():
        base = kfuse.compile(ROOT / "examples" / f"{name}.kf")
        p = base.program
        dims = {d.id: size for d in p.dims}
        host = random_inputs(p, dims, 0)
        dev = {k: (cp.asarray(v, dtype=np.float32) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        host32 = {k: (v.astype(np.float32).astype(np.float64) if isinstance(v, np.ndarray) else float(np.float32(v)))
                  for k, v in host.items()}
        ref, mag = evaluate(p, host32), evaluate(p, host32, magnitude=True)
        outs = {v.name: cp.full(tuple(dims[d] for d in v.dims), np.nan, np.float32) for v in p.outputs}
        for label, make in choices:
            try:
                prog = make(base)
                got = prog(out=outs, sync=True, **dev)
                got = got if isinstance(got, tuple) else (got,)
                err = max(relative_error(cp.asnumpy(g), ref[v.id], mag[v.id]) for v, g in zip(p.outputs, got))
                t = median_us(lambda: prog(out=outs, **dev), reps=30)
            except kfuse.KfuseError as e:
                print(f"{name:8s} {label:32s} refused: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            traffic = prog.traffic(dims)
            print(f"{name:8s} {label:32s} err {err:8.1e} {t:8.1f} us {len(prog.kernels)}k "
                  f"{traffic / (t * 1e-6) / 1e9:6.0f} GB/s {100 * traffic / (t * 1e-6) / 1e9 / bw:5.1f}%",
                  flush=True)
            for o in outs.values():
                o.fill(np.nan)


if __name__ == "__main__":
    main()
