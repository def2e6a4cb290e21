"""What the clears of reduced outputs cost: each example's bound call (n = 8192, N = 2^26, float32)
timed as it runs (fills, and the kernel after a fill launched dependent on it: PDL), with the
kernels launched only after the fills have finished (no PDL), and with the fills left out (the
results are then wrong: timing only).  The variants are the bound call's prepared launches
(``BoundCall.launches``) with ``packed`` (the PDL launch) or ``fills`` left out.

    python docs/experiments/clears.py [NAME ...]
"""
import sys
from dataclasses import replace
from pathlib import Path

import kfuse
from kfuse.reference import device_case
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)


def main(names):
    for name in names:
        prog = kfuse.compile(ROOT / "examples" / f"{name}.kf")
        p = prog.program
        size = 8192 if any(v.type == "matrix" for v in p.values) else 2**26
        dims = {d.id: size for d in p.dims}
        dev, _, _ = device_case(p, dims, "float32", 0)
        bound = prog.bind(**dev)
        t = median_us(bound, reps=50)
        launches = bound.launches
        clears = sum(len(L.fills) for L in launches)
        bound.launches = [replace(L, packed=None) for L in launches]
        t_serial = median_us(bound, reps=50)
        bound.launches = [replace(L, fills=[], packed=None) for L in launches]
        t0 = median_us(bound, reps=50)
        print(f"{name:8s} {len(launches)} kernel(s), {clears} clear(s): {t:8.1f} us; "
              f"clear finished before the kernel starts {t_serial:8.1f} us; without the clears {t0:8.1f} us",
              flush=True)

if __name__ == "__main__":
    main(sys.argv[1:] or ["bicgk", "sgemv", "atax", "gemver", "gesummv", "axpydot"])
