"""Vector calls on the rows of strips (issue 18): a gemv's result used in its kernel by a dot, an
axpy or a scal (one kernel: the gemv on strips of whole rows, the vector call once per strip on its
rows) against the best plan kfuse ranks without them (the vector call in a kernel of its own, the
gemv's result stored and read again: the plan without ``vector_on_strips``), and the limit (the compulsory traffic over the copy
bandwidth), float32 and float64; every result checked against the float64 reference first.

    PYTHONPATH=src python3 docs/experiments/vector_on_strips.py [--sizes 4096 8192 16384]
"""
import argparse

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.reference import device_case, evaluate, relative_error

SCRIPTS = {
    "cg_step": "matrix A[n, n]; vector p[n], q[n]; scalar pq; input A, p; q = gemv(A, p); pq = dot(p, q); "
               "return q, pq;",
    "power": "matrix A[n, n]; vector x[n], y[n]; scalar nn; input A, x; y = gemv(A, x); nn = dot(y, y); "
             "return y, nn;",
    "gemv_axpy": "matrix A[n, n]; vector x[n], z[n], t[n], u[n]; scalar a; input A, x, z, a; t = gemv(A, x); "
                 "u = axpy(a, t, z); return u;",
    "atax_dot": "matrix A[n, n]; vector x[n], t[n], y[n]; scalar tt; input A, x; t = gemv(A, x); y = gemtv(A, t); "
                "tt = dot(t, t); return y, tt;",
}


def on_rows(plan) -> bool:
    return any(kc.on_rows for k in plan.kernels for kc in k.calls)


def timed(prog, dims, timer, tol):
    """(median us, worst relative error) of ``prog`` on fresh inputs, outputs poisoned first."""
    dev, host, poisoned = device_case(prog.program, dims, prog.dtype, seed=1)
    bound = prog.bind(out=poisoned, **dev)
    bound(sync=True)
    ref, mag = evaluate(prog.program, host), evaluate(prog.program, host, magnitude=True)
    import cupy as cp
    err = max(relative_error(cp.asnumpy(poisoned[v.name]), ref[v.id], mag[v.id]) for v in prog.program.outputs)
    assert err < tol, (prog.describe(), err)
    return timer(bound)[1], err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    args = ap.parse_args()
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    print("| script | dtype | n | fused (us) | apart (us) | apart / fused | limit (us) | fused / limit |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dt in args.dtypes:
        tol = 1e-5 if dt == "float32" else 1e-12
        for n in args.sizes:
            for name, text in SCRIPTS.items():
                prog = kfuse.compile(text, dtype=dt, tuned=False, sizes={"n": n}, vector_on_strips=True)
                dims = {d.id: n for d in prog.program.dims}
                apart = next(p for p in prog.search.plans() if not on_rows(p))
                t_fused, _ = timed(prog, dims, timer, tol)
                t_apart, _ = timed(prog.with_plan(apart), dims, timer, tol)
                limit = prog.compulsory_traffic(dims) / bw / 1e3
                tag = "" if on_rows(prog.plan) else " (planned apart)"
                print(f"| {name}{tag} | {dt} | {n} | {t_fused:.1f} | {t_apart:.1f} | {t_apart / t_fused:.2f}x | "
                      f"{limit:.1f} | {t_fused / limit:.2f}x |", flush=True)
                print(f"<!-- {name} {dt} {n}: fused {prog.plan.summary()}; apart {apart.summary()} -->", flush=True)


if __name__ == "__main__":
    main()
