"""Why every float64 map plan runs at 75-89 % of the copy bandwidth while torch.compile reaches 100 %:
the same WAXPBY (N = 2^26, float64) timed as kfuse, a CuPy elementwise kernel and torch eager on the
same arrays, on arrays at other offsets, and with kfuse's output given or allocated.

    python docs/experiments/f64_maps.py
"""
import kfuse
import numpy as np
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

N = 2**26


def main():
    cp = cupy()
    timer = device_timer(reps=30, warmup=3)
    t = lambda f: timer(f)[1]                                    # noqa: E731
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s", flush=True)
    for dtype in ("float64", "float32"):
        dt = np.dtype(dtype)
        prog = kfuse.compile("examples/waxpby.kf", dtype=dtype, tuned=False)
        ew = cp.ElementwiseKernel("T a, T x, T b, T y", "T w", "w = a * x + b * y", "waxpby_ew")
        limit = 3 * N * dt.itemsize / 3027e3
        for label, pad in (("pool arrays", 0), ("offset 4 KiB + 256 B", 4096 + 256), ("offset 1 MiB + 768 B", 2**20 + 768)):
            bufs = [cp.random.random(N + 3 * pad // dt.itemsize + 64).astype(dt) for _ in range(3)]
            x, y, w = (buf[(i + 1) * pad // dt.itemsize:][:N] for i, buf in enumerate(bufs))
            a, b = 0.5, -1.25
            bound = prog.bind(a=a, b=b, x=x, y=y, out={"w": w})
            res = {"kfuse (out given)": t(bound),
                   "kfuse (plain call)": t(lambda: prog(a=a, b=b, x=x, y=y)),
                   "cupy elementwise": t(lambda: ew(a, x, b, y, w)),
                   "cupy copy x->w": t(lambda: cp.copyto(w, x))}
            try:
                import torch
                tx, ty, tw = (torch.as_tensor(v, device="cuda") for v in (x, y, w))
                res["torch eager"] = t(lambda: torch.add(tx * a, ty, alpha=b, out=tw))
            except ImportError:
                pass
            got = w.get()
            ref = a * x.get().astype(np.float64) + b * y.get().astype(np.float64)
            print(f"{dtype} {label} (x at {x.data.ptr % 2**30:#x}, y {y.data.ptr % 2**30:#x}, "
                  f"w {w.data.ptr % 2**30:#x}); limit {limit:.1f} us; last result error "
                  f"{np.abs(got - ref).max():.1e}", flush=True)
            for k, v in res.items():
                print(f"   {k:22s} {v:8.1f} us", flush=True)
            del bufs, x, y, w
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
