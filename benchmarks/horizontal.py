"""Horizontal fusion on the GPU: scripts with independent calls, planned with and without it, at
n = 1024 / N = 2^20 and n = 8192 / N = 2^24.  Each plan is checked against the float64 reference
first; then the GPU time of a call (CUDA events around 40 calls queued behind a long copy, so
that the host's cost is hidden; median of 9) and the wall time per call of a Python loop (the call
repeated with the same arrays: graph replay).  Prints a markdown table; the copy bandwidth of the
run is in its header.

    PYTHONPATH=src python3 benchmarks/horizontal.py [--random 6] [--out results.md]
"""
import argparse
import statistics
import sys
import time

import numpy as np

import kfuse
from kfuse.frontend.random_scripts import random_script
from kfuse.reference import device_case, evaluate, relative_error

SCRIPTS = {
    "4 axpy": """scalar a; vector x1[n], y1[n], x2[n], y2[n], x3[n], y3[n], x4[n], y4[n], z1[n], z2[n], z3[n], z4[n];
input a, x1, y1, x2, y2, x3, y3, x4, y4;
z1 = axpy(a, x1, y1); z2 = axpy(a, x2, y2); z3 = axpy(a, x3, y3); z4 = axpy(a, x4, y4);
return z1, z2, z3, z4;""",
    "axpy scal waxpby": """scalar a, b; vector x1[n], y1[n], x2[n], x3[n], y3[n], z1[n], z2[n], z3[n];
input a, b, x1, y1, x2, x3, y3;
z1 = axpy(a, x1, y1); z2 = scal(b, x2); z3 = waxpby(a, x3, b, y3);
return z1, z2, z3;""",
    "2 gemv": """matrix A1[n, n], A2[n, n]; vector x1[n], x2[n], y1[n], y2[n];
input A1, A2, x1, x2;
y1 = gemv(A1, x1); y2 = gemv(A2, x2);
return y1, y2;""",
    "gemv gemtv": """matrix A1[n, n], A2[n, n]; vector x1[n], x2[n], y1[n], y2[n];
input A1, A2, x1, x2;
y1 = gemv(A1, x1); y2 = gemtv(A2, x2);
return y1, y2;""",
}
TOL = {"float32": 1e-5, "float64": 1e-12}


def gpu_us(fn, calls=40, rounds=9):
    """GPU microseconds per call with the host's cost hidden: a 2 GiB copy keeps the GPU busy
    while the host queues ``calls`` calls between two events (median of ``rounds``)."""
    import cupy as cp
    src = cp.ones(2**29, dtype=cp.float32)
    dst = cp.empty_like(src)
    for _ in range(5):
        fn()
    per = []
    for _ in range(rounds):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        cp.copyto(dst, src)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        per.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / calls)
    return statistics.median(per)


def checked_timing(prog, dims, dtype, seed=0):
    import cupy as cp
    dev, host, outs = device_case(prog.program, dims, dtype, seed)
    got = prog(out=outs, sync=True, **dev)
    got = got if isinstance(got, tuple) else (got,)
    ref, mag = evaluate(prog.program, host), evaluate(prog.program, host, magnitude=True)
    for v, g in zip(prog.program.outputs, got):
        err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
        if not err < TOL[dtype]:
            raise SystemExit(f"{prog.program.name}: {v.name} wrong (relative error {err:.2e})")
    fn = lambda: prog(out=outs, **dev)     # noqa: E731
    gpu = gpu_us(fn)
    walls = []
    for _ in range(5):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(300):
            fn()
        cp.cuda.Device().synchronize()
        walls.append((time.perf_counter() - t0) / 300 * 1e6)
    return gpu, statistics.median(walls)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=6, help="random scripts whose plan horizontal fusion changes")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from kfuse.bench.harness import copy_bandwidth, device_timer
    bw = copy_bandwidth(2**28, device_timer(50, 5))
    lib = kfuse.load_library()
    scripts = dict(SCRIPTS)
    seed, found = 1000, 0
    while found < args.random and seed < 1200:
        rs = random_script(lib, seed)
        a = kfuse.compile(rs.text, tuned=False, sizes=_sizes(rs.text, 1024, 2**20))
        b = kfuse.compile(rs.text, tuned=False, horizontal=False, sizes=_sizes(rs.text, 1024, 2**20))
        if len(a.plan.kernels) < len(b.plan.kernels):
            scripts[f"random {seed}"] = rs.text
            found += 1
        seed += 1
    lines = [f"copy bandwidth {bw:.0f} GB/s (read + write)", "",
             "| script | dtype | n / N | kernels apart -> merged | GPU us apart | GPU us merged | speed-up | "
             "wall us apart | wall us merged |", "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    print("\n".join(lines), flush=True)
    for dtype in args.dtypes.split(","):
        for n, N in ((1024, 2**20), (8192, 2**24)):
            for name, text in scripts.items():
                sizes = _sizes(text, n, N)
                merged = kfuse.compile(text, dtype=dtype, tuned=False, sizes=sizes)
                apart = kfuse.compile(text, dtype=dtype, tuned=False, sizes=sizes, horizontal=False)
                dims = {d.id: sizes[d.name] for d in merged.program.dims}
                gm, wm = checked_timing(merged, dims, dtype)
                ga, wa = checked_timing(apart, dims, dtype)
                row = (f"| {name} | {dtype} | {n} / 2^{int(np.log2(N))} | {len(apart.plan.kernels)} -> "
                       f"{len(merged.plan.kernels)} | {ga:.1f} | {gm:.1f} | {ga / gm:.2f}x | {wa:.1f} | {wm:.1f} |")
                lines.append(row)
                print(row, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def _sizes(text, n, N):
    """Every size name of the script: n when the script has a matrix, else N."""
    from kfuse.frontend import parse_script
    prog = parse_script(text, kfuse.load_library())
    has_matrix = any(v.type == "matrix" for v in prog.values)
    return {d.name: d.literal or (n if has_matrix else N) for d in prog.dims}


if __name__ == "__main__":
    sys.exit(main())
