"""Time the hand-written one-pass ATAX (atax_onepass.cu) against kfuse's ATAX plan (two kernels, A
read twice) and the one-pass limit (one read of A over the copy bandwidth), float32 and float64,
n = 4096, 8192, 16384; every result checked against a float64 NumPy reference first.

    PYTHONPATH=src python3 docs/experiments/atax_onepass.py
"""
from pathlib import Path

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# (dtype, n, threads, vectors per thread per row, rows per strip)
CONFIGS = [("float32", 8192, 1024, 2, 1), ("float32", 8192, 1024, 2, 2), ("float32", 8192, 1024, 2, 4),
           ("float32", 8192, 512, 4, 1), ("float32", 8192, 512, 4, 2), ("float32", 8192, 256, 8, 1),
           ("float32", 4096, 1024, 1, 4), ("float32", 4096, 512, 2, 2), ("float32", 4096, 256, 4, 2),
           ("float32", 16384, 1024, 4, 1), ("float32", 16384, 1024, 4, 2), ("float32", 16384, 512, 8, 1),
           ("float64", 8192, 1024, 4, 1), ("float64", 8192, 1024, 4, 2), ("float64", 8192, 512, 8, 1),
           ("float64", 4096, 1024, 2, 2), ("float64", 4096, 512, 4, 1)]


def main():
    cp = cupy()
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    names = [f"atax_onepass<{'float' if dt == 'float32' else 'double'}, {th}, {v}, {r}>"
             for dt, n, th, v, r in CONFIGS]
    mod = cp.RawModule(code=(HERE / "atax_onepass.cu").read_text(), options=("-std=c++17",),
                       name_expressions=names)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    done = {}
    for (dt, n, th, v, r), name in zip(CONFIGS, names):
        assert n == th * v * (4 if dt == "float32" else 2)
        if (dt, n) not in done:
            rs = np.random.default_rng(n)
            A = cp.asarray(rs.standard_normal((n, n)), dtype=dt)
            x = cp.asarray(rs.standard_normal(n), dtype=dt)
            ref = A.astype(cp.float64).T @ (A.astype(cp.float64) @ x.astype(cp.float64))
            prog = kfuse.compile(ROOT / "examples" / "atax.kf", dtype=dt, tuned=False, sizes={"n": n})
            out = {"y": cp.full(n, cp.nan, dtype=dt)}
            bound = prog.bind(A=A, x=x, out=out)
            bound()
            err_k = float(cp.linalg.norm(out["y"] - ref) / cp.linalg.norm(ref))
            t_k = timer(bound)[1]
            limit = A.nbytes / bw / 1e3
            print(f"{dt} n={n}: one-pass limit {limit:.1f} us; kfuse ATAX plan {t_k:.1f} us "
                  f"({t_k / limit:.2f}x, error {err_k:.1e})", flush=True)
            done[(dt, n)] = (A, x, ref, limit)
        A, x, ref, limit = done[(dt, n)]
        f = mod.get_function(name)
        y = cp.full(n, cp.nan, dtype=dt)
        per_sm = max(1, min(2048 // th, 65536 // (th * max(f.num_regs, 1))))
        grid = sms * per_sm

        def run():
            y.fill(0)
            f((grid,), (th,), (A, x, y, np.int64(n)))
        run()
        err = float(cp.linalg.norm(y - ref) / cp.linalg.norm(ref))
        t = timer(run)[1]
        print(f"   {th:4d} threads, {v} vectors/thread/row, {r} row(s)/strip: {f.num_regs:3d} regs, grid {grid}: "
              f"{t:7.1f} us ({t / limit:.2f}x the one-pass limit), error {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
