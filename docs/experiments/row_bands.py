"""gemv over row bands (`bandlib/`, an experiment library): a block reads R rows in pieces of NC
columns along j with the strip's routines (the whole block's 16-byte loads along each row), adds
its row sums when its band ends, and never holds a whole row -- so float64 rows of 16384 take one
block, where the strips of whole rows spill (fusion/legality.py, fits_at) and the `wide` tiles
(32 rows, a warp reading 8 of them) read A at 699.5 us against cuBLAS's 690.5.  Every band shape
timed beside the shipped library's first choice and cupy's A @ p, each checked first against
A @ p in float64 on the GPU (cold L2, CUDA events, median of 20).

    PYTHONPATH=src python3 docs/experiments/row_bands.py [--cases float64:16384 ...]
"""
import argparse
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer

GEMV = "matrix A; vector p, q; input A, p; q = gemv(A, p); return q;"
BAND = "matrix A; vector p, q; input A, p; q = gemv_band(A, p); return q;"
LIB = Path(__file__).resolve().parent / "bandlib"


def sized(text, dt, n, **kw):
    base = kfuse.compile(text, dtype=dt, tuned=False, **kw)
    return base.for_sizes({d.id: d.literal or n for d in base.program.dims})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["float64:16384", "float64:8192", "float64:4096",
                                                  "float32:16384", "float32:8192", "float64:12289"])
    args = ap.parse_args()
    import cupy as cp
    timer = device_timer(reps=20, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for case in args.cases:
        dt, n = case.split(":")
        n = int(n)
        A = cp.random.default_rng(0).standard_normal((n, n), dtype=dt)
        p = cp.random.default_rng(1).standard_normal(n, dtype=dt)
        ref = A.astype(cp.float64) @ p.astype(cp.float64)
        t_cupy = timer(lambda: A @ p)[1]
        print(f"{dt} n={n}: one read of A {A.nbytes / bw / 1e3:.1f} us, cupy A @ p {t_cupy:.1f} us", flush=True)
        first = sized(GEMV, dt, n)
        band = sized(BAND, dt, n, library=str(LIB))
        seen, plans = set(), [("first choice", first, first.plan)]
        for plan in band.search.plans():
            if plan.summary() not in seen:
                seen.add(plan.summary())
                plans.append((f"band {len(seen) - 1}", band, plan))
        rows = []
        for what, base, plan in plans:
            prog = base.with_plan(plan)
            q = cp.full(n, cp.nan, dtype=dt)
            bound = prog.bind(out={"q": q}, A=A, p=p)
            bound(sync=True)
            err = float(cp.linalg.norm(q.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            assert err < (1e-5 if dt == "float32" else 1e-12), (plan.summary(), err)
            t = timer(bound)[1]
            rows.append((t, what, plan.summary()))
            if what == "first choice":
                print(f"  first choice: {t:.1f} us ({t / t_cupy:.3f}x cupy): {plan.summary()}", flush=True)
            prog.release()
        rows.sort()
        for t, what, summary in rows[:8]:
            print(f"  {t:8.1f} us ({t / t_cupy:.3f}x cupy) {what}: {summary}", flush=True)
        print(f"  ({len(rows) - 1} band shapes timed; slowest {rows[-1][0]:.1f} us)", flush=True)
        del A, p, ref
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
