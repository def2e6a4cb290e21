"""ATAX one pass (kfuse's plan: strips of whole rows, A read once; rows longer than a block holds
split over a thread-block cluster) against the best two-kernel plan kfuse ranks (A read twice)
and the one-pass limit (one read of A over the copy bandwidth), float32 and float64, n = 4096,
8192, 16384 (and any --sizes); every result checked against float64 first.

    PYTHONPATH=src python3 benchmarks/atax_onepass_bench.py [--sizes 4096 8192 16384 32768]
"""
import argparse
from pathlib import Path

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

ATAX = Path(__file__).resolve().parents[1] / "examples" / "atax.kf"


def atax_inputs(cp, n: int, dt: str):
    """(A, x, the float64 reference of A^T (A x)) on the device: fresh random normal entries."""
    rs = np.random.default_rng(n)
    A = cp.asarray(rs.standard_normal((n, n), dtype=np.float32), dtype=dt)
    x = cp.asarray(rs.standard_normal(n), dtype=dt)
    A64 = A.astype(cp.float64)
    ref = A64.T @ (A64 @ x.astype(cp.float64))
    return A, x, ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    sizes = ap.parse_args().sizes
    cp = cupy()
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for dt in ("float32", "float64"):
        for n in sizes:
            A, x, ref = atax_inputs(cp, n, dt)
            prog = kfuse.compile(ATAX, dtype=dt, tuned=False, sizes={"n": n})
            two = next(p for p in prog.search.plans() if len(p.kernels) == 2)
            limit = A.nbytes / bw / 1e3
            line = [f"{dt} n={n}: one-pass limit {limit:.1f} us"]
            for name, p in (("planned", prog), ("two-kernel", prog.with_plan(two))):
                out = {"y": cp.full(n, cp.nan, dtype=dt)}
                bound = p.bind(A=A, x=x, out=out)
                bound()
                err = float(cp.linalg.norm(out["y"] - ref) / cp.linalg.norm(ref))
                t = timer(bound)[1]
                line.append(f"{name} ({len(p.kernels)} kernel(s): {p.plan.summary()}) {t:.1f} us "
                            f"({t / limit:.2f}x, error {err:.1e})")
            print("\n   ".join(line), flush=True)
            del A


if __name__ == "__main__":
    main()
