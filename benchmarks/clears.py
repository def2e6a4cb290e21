"""What the clears of reduced outputs cost: each example's bound call (n = 8192, N = 2^26, float32)
timed as it runs, and again with the memsets left out (the results are then wrong: timing only).

    python benchmarks/clears.py [NAME ...]
"""
import sys
from pathlib import Path

import kfuse
from kfuse.reference import device_case
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parent.parent


def main(names):
    for name in names:
        prog = kfuse.compile(ROOT / "examples" / f"{name}.kf")
        p = prog.program
        size = 8192 if any(v.type == "matrix" for v in p.values) else 2**26
        dims = {d.id: size for d in p.dims}
        dev, _, _ = device_case(p, dims, "float32", 0)
        bound = prog.bind(**dev)
        t = median_us(bound, reps=50)
        clears = sum(len(c) for *_, c, _ in bound.launches)
        bound.launches = [(f, g, th, a, [], n) for f, g, th, a, c, n in bound.launches]
        t0 = median_us(bound, reps=50)
        print(f"{name:8s} {len(bound.launches)} kernel(s), {clears} clear(s): {t:8.1f} us; "
              f"without the clears {t0:8.1f} us", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["bicgk", "sgemv", "atax", "gemver", "gesummv", "axpydot"])
