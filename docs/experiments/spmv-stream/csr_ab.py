"""A/B: CSR row mapping (groups of lanes) against streamed rows (lanes = 0), per matrix and dtype,
beside cuSPARSE (CuPy) and torch; single-call event timing and 20 back-to-back calls."""
import sys, statistics, json
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "src")
import numpy as np, cupy as cp
import sparse as B
import kfuse
from kfuse.runtime import csr as C
import math
orig = C.mapping
def groups_map(rows, nnz, longest, median=None):     # the mapping before streamed rows
    typical = nnz / rows if median is None else min(nnz / rows, median)
    return min(32, max(1, 2 ** round(math.log2(max(typical, 1.0))))), orig(rows, nnz, longest, median)[1]

def timed_n(fn, reps, n):
    for _ in range(3): fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(n): fn()
        b.record(); b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / n)
    return statistics.median(out)

def noskew(m, seed):
    rng = cp.random.default_rng(seed)
    lengths = rng.integers(1, 41, m)
    return B._pattern(lengths, m, m, rng)

m = 1_000_000
bw = B.copy_bandwidth(20)
print(f"copy bandwidth {bw/1e9:.0f} GB/s", flush=True)
cases = [("band4", lambda: B.banded(m, 4, 0)), ("band8", lambda: B.banded(m, 8, 6)), ("band16", lambda: B.banded(m, 16, 1)),
         ("band64", lambda: B.banded(m, 64, 2)), ("skewed", lambda: B.skewed(m, 3)),
         ("rand1-40", lambda: noskew(m, 4)), ("band256", lambda: B.banded(m // 8, 256, 5))]
src = "csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n"
rows = []
for name, make in cases:
    indptr, indices = make()
    mm = indptr.shape[0] - 1
    nnz = indices.shape[0]
    for dtype in ("float32", "float64"):
        data = cp.random.default_rng(1).standard_normal(nnz).astype(dtype)
        x = cp.random.default_rng(2).standard_normal(mm).astype(dtype)
        import cupyx.scipy.sparse as cps
        A64 = cps.csr_matrix((data.astype(cp.float64), indices, indptr), shape=(mm, mm))
        ref = A64 @ x.astype(cp.float64); mag = abs(A64) @ cp.abs(x.astype(cp.float64))
        item = np.dtype(dtype).itemsize
        limit = (nnz * (item + 4) + (mm + 1) * 4 + 2 * mm * item) / bw * 1e6
        prog = kfuse.compile(src, dtype=dtype)
        prog2 = kfuse.compile(src, dtype=dtype, library="scratch/lib_c2", shipped_library=False)
        res = {"case": name, "dtype": dtype, "nnz/row": round(nnz / mm, 1), "limit": round(limit, 1)}
        for label, mp, prog in (("groups", groups_map, prog), ("kfuse", orig, prog), ("chunk2", orig, prog2)):
            C.mapping = mp
            bound = prog.bind(A=kfuse.CSR(indptr, indices, data, (mm, mm)), x=x)
            bound.result[...] = cp.nan
            bound()
            err = B.check(bound.result, ref, mag)
            res[label] = round(B.timed(bound, 30), 1)
            res[label + " x20"] = round(timed_n(bound, 10, 20), 1)
            res[label + " err"] = float(f"{err:.1e}")
        C.mapping = orig
        A = cps.csr_matrix((data, indices, indptr), shape=(mm, mm))
        res["cusparse"] = round(B.timed(lambda: A @ x, 30), 1)
        res["cusparse x20"] = round(timed_n(lambda: A @ x, 10, 20), 1)
        import torch
        At = torch.sparse_csr_tensor(torch.as_tensor(indptr), torch.as_tensor(indices), torch.as_tensor(data), size=(mm, mm))
        xt = torch.as_tensor(x)
        res["torch"] = round(B.timed(lambda: At @ xt, 30), 1)
        res["torch x20"] = round(timed_n(lambda: At @ xt, 10, 20), 1)
        print(json.dumps(res), flush=True)
        rows.append(res)
import os
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "csr_ab.json"), "w"), indent=1)
