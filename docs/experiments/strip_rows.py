"""More rows per strip where rows are short: does R = 4 or 8 (rows per strip) take the one-pass
ATAX closer to its limit at n = 4096, where each block walks ~31 strips with a barrier each?

The shipped library offers R = 1, 2; this copies it to a temporary folder with R = [1, 2, 4, 8]
for the strip variants, enumerates every one-kernel (one-pass) plan the planner accepts (its
register check refuses the strips that would spill), and times each distinct strip shape, every
result checked against float64 first.  Beside them: one read of A by cupy.sum and the limit (one
read of A over the copy bandwidth).

    PYTHONPATH=src python3 docs/experiments/strip_rows.py [--sizes 4096 8192] [--dtypes float32 float64]
"""
import argparse
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.library.loader import load_library
from kfuse.runtime.gpu import cupy

ROOT = Path(__file__).resolve().parents[2]


def library_with_rows(rows):
    folder = Path(tempfile.mkdtemp()) / "blas"
    shutil.copytree(ROOT / "src" / "kfuse" / "blas", folder)
    toml = folder / "blas2.toml"
    text = toml.read_text()
    assert "R = [1, 2]" in text
    toml.write_text(text.replace("R = [1, 2]", f"R = {list(rows)}"))
    return load_library(folder, shipped=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8])
    args = ap.parse_args()
    cp = cupy()
    lib = library_with_rows(args.rows)
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for dt in args.dtypes:
        for n in args.sizes:
            rs = np.random.default_rng(n)
            A = cp.asarray(rs.standard_normal((n, n)), dtype=dt)
            x = cp.asarray(rs.standard_normal(n), dtype=dt)
            A64 = A.astype(cp.float64)
            ref = A64.T @ (A64 @ x.astype(cp.float64))
            del A64
            limit = A.nbytes / bw / 1e3
            read = timer(lambda: cp.sum(A))[1]
            print(f"{dt} n={n}: limit {limit:.1f} us, cupy.sum(A) {read:.1f} us ({read / limit:.2f}x)", flush=True)
            prog = kfuse.compile(ROOT / "examples" / "atax.kf", dtype=dt, library=lib, tuned=False,
                                 sizes={"n": n})
            shapes = {}
            for k, p in enumerate(prog.search.plans()):
                if k > 5000:
                    break
                if len(p.kernels) == 1:
                    shape = re.findall(r"strip\[([^\]]*)\]", p.summary())
                    shapes.setdefault(shape[0] if shape else p.summary(), (k, p))
            for shape, (k, p) in sorted(shapes.items(), key=lambda kv: kv[1][0]):
                q = prog.with_plan(p)
                out = {"y": cp.full(n, cp.nan, dtype=dt)}
                bound = q.bind(A=A, x=x, out=out)
                bound()
                err = float(cp.linalg.norm(out["y"] - ref) / cp.linalg.norm(ref))
                assert err < (1e-4 if dt == "float32" else 1e-10), (shape, err)
                t = timer(bound)[1]
                print(f"   rank {k:4d} strip[{shape}]: {t:7.1f} us ({t / limit:.2f}x; predicted "
                      f"{p.predicted * 1e6:.1f}; error {err:.1e})", flush=True)
            del A


if __name__ == "__main__":
    main()
