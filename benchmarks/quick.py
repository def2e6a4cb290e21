"""Quick timing of every example's current plan (median of CUDA-event timings) and copy bandwidth."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
from kfuse.reference import random_inputs

ROOT = Path(__file__).resolve().parent.parent


def median_time(fn, reps=50, warmup=5):
    for _ in range(warmup):
        fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    return float(np.median(times))


def main(n=8192, N=2**26, dtype="float32"):
    src = cp.empty(2**28, dtype=np.float32)
    dst = cp.empty_like(src)
    t = median_time(lambda: cp.copyto(dst, src), reps=20)
    bw = 2 * src.nbytes / (t * 1e-6) / 1e9
    print(f"copy bandwidth: {bw:.0f} GB/s (read + write)")
    del src, dst
    for path in sorted((ROOT / "examples").glob("*.kf")):
        prog = kfuse.compile(path, dtype=dtype)
        p = prog.program
        size = n if any(v.type == "matrix" for v in p.values) else N
        dims = {d.id: size for d in p.dims}
        host = random_inputs(p, dims, 0)
        dev = {k: (cp.asarray(v, dtype=dtype) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        t = median_time(lambda: prog(**dev))
        print(f"{path.stem:8s} size {size:>9d}  {len(prog.kernels)} kernel(s)  {t:9.1f} us", flush=True)
        del dev


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
