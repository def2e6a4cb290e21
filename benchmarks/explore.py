"""Explore launch choices of single-call kernels (ipb, BY, iterations) on the GPU: time and % of copy."""
import sys
from dataclasses import replace
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
from kfuse.api import CompiledScript
from kfuse.codegen.kernel import build_kernel
from kfuse.plan import Plan
from kfuse.reference import random_inputs
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parent.parent


def copy_bw():
    src = cp.empty(2**28, dtype=np.float32)
    dst = cp.empty_like(src)
    t = median_us(lambda: cp.copyto(dst, src), reps=30)
    return 2 * src.nbytes / (t * 1e-6) / 1e9


def variants(prog, **changes):
    """The program's plan with every kernel spec changed."""
    specs = tuple(replace(k, **changes) for k in prog.plan.kernels)
    return CompiledScript(prog.program, prog.library, prog.dtype, Plan(prog.program, specs),
                          [build_kernel(s, prog.library) for s in specs])


def main():
    bw = copy_bw()
    print(f"copy bandwidth {bw:.0f} GB/s")
    for name, size, grid in [("sscal", 2**26, [dict(ipb=p, iters=i) for p in (4, 8, 16, 32) for i in (0, 1, 8, 64)]),
                             ("sgemv", 8192, [dict(iters=i) for i in (0, 1, 4, 16, 64)]),
                             ("bicgk", 8192, [dict(iters=i) for i in (0, 4, 16, 64)]),
                             ("madd", 8192, [dict(iters=i) for i in (0, 1, 4, 16)])]:
        base = kfuse.compile(ROOT / "examples" / f"{name}.kf")
        dims = {d.id: size for d in base.program.dims}
        host = random_inputs(base.program, dims, 0)
        dev = {k: (cp.asarray(v, dtype=np.float32) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        outs = {v.name: cp.empty(tuple(dims[d] for d in v.dims), np.float32) for v in base.program.outputs}
        for ch in grid:
            prog = variants(base, **ch)
            t = median_us(lambda: prog(out=outs, **dev), reps=40)
            traffic = prog.traffic(dims)
            print(f"{name:6s} {str(ch):28s} {t:8.1f} us  {traffic / (t * 1e-6) / 1e9:6.0f} GB/s "
                  f"{100 * traffic / (t * 1e-6) / 1e9 / bw:5.1f}% of copy", flush=True)
        # per-call host overhead: small size, time many calls with a host clock
        import time
        small = {k: (v[:8] if hasattr(v, 'ndim') and v.ndim == 1 else v[:8, :8] if hasattr(v, 'ndim') else v)
                 for k, v in dev.items()}
        small = {k: (cp.ascontiguousarray(v) if hasattr(v, 'ndim') else v) for k, v in small.items()}
        for _ in range(10):
            base(**small)
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            base(**small)
        cp.cuda.Device().synchronize()
        print(f"{name:6s} host time per call at tiny size: {(time.perf_counter() - t0) / 200 * 1e6:.1f} us")


if __name__ == "__main__":
    main()
