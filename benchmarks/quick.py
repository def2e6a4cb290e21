"""Time every example's plan (median of CUDA-event timings of bound calls) beside the copy bandwidth.

    python benchmarks/quick.py [--unfused] [n] [N]
"""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
from kfuse.reference import random_inputs
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parent.parent


def main(n=8192, N=2**26, dtype="float32", fuse=True):
    src = cp.empty(2**28, dtype=np.float32)
    dst = cp.empty_like(src)
    t = median_us(lambda: cp.copyto(dst, src), reps=20)
    print(f"copy bandwidth: {2 * src.nbytes / (t * 1e-6) / 1e9:.0f} GB/s (read + write)")
    del src, dst
    for path in sorted((ROOT / "examples").glob("*.kf")):
        prog = kfuse.compile(path, dtype=dtype, fuse=fuse, tuned=False)
        p = prog.program
        size = n if any(v.type == "matrix" for v in p.values) else N
        dims = {d.id: size for d in p.dims}
        host = random_inputs(p, dims, 0)
        dev = {k: (cp.asarray(v, dtype=dtype) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        t = median_us(prog.bind(**dev), reps=50)
        print(f"{path.stem:8s} size {size:>9d}  {len(prog.kernels)} kernel(s)  {t:9.1f} us", flush=True)
        del dev


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--unfused"]
    main(*(int(a) for a in args[:2]), fuse="--unfused" not in sys.argv)
