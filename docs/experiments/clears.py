"""What the clears of reduced outputs cost: each example's bound call (n = 8192, N = 2^26, float32)
timed as it runs (fills, and the kernel after a fill launched dependent on it: PDL), with the
kernels launched only after the fills have finished (``KFUSE_PDL=0``), and with the fills left
out of the binding's launches (the results are then wrong: timing only).

    python docs/experiments/clears.py [NAME ...]
"""
import os
import sys
from pathlib import Path

import kfuse
from kfuse.reference import device_case
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)


def timed(name, dev, pdl: bool, fills: bool):
    os.environ["KFUSE_PDL"] = "1" if pdl else "0"
    try:
        bound = kfuse.compile(ROOT / "examples" / f"{name}.kf").bind(**dev)
    finally:
        del os.environ["KFUSE_PDL"]
    b = bound.binding
    if not fills:
        b.launches = [(L, patches) for L, patches in b.launches if L.name != "kf_fill"]
    return median_us(bound, reps=50), b


def main(names):
    for name in names:
        p = kfuse.compile(ROOT / "examples" / f"{name}.kf").program
        size = 8192 if any(v.type == "matrix" for v in p.values) else 2**26
        dev, _, _ = device_case(p, {d.id: size for d in p.dims}, "float32", 0)
        t, b = timed(name, dev, True, True)
        t_serial, _ = timed(name, dev, False, True)
        t0, _ = timed(name, dev, False, False)
        clears = sum(1 for L, _ in b.launches if L.name == "kf_fill")
        print(f"{name:8s} {len(b.kernel_launches)} kernel(s), {clears} clear(s): {t:8.1f} us; "
              f"clear finished before the kernel starts {t_serial:8.1f} us; without the clears {t0:8.1f} us",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["bicgk", "sgemv", "atax", "gemver", "gesummv", "axpydot"])
