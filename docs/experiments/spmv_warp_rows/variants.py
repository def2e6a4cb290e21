"""Issue 58 experiment: candidate CSR mat-vec mappings as standalone kernels, beside kfuse's spmv
(its chosen mapping) and cuSPARSE, on the matrix set of benchmarks/matrices.py (int32 indices).

Candidates (all: one output row per lane at the end, the entries of the rows loaded coalesced):
* ``warpK``: a warp takes R = 32 consecutive rows; lane l loads row pointer r0 + l (and lane 0 the
  end); the warp walks its rows' entries in chunks of 32 K (each lane K entries in flight: index,
  value, then the gather of x), writes the products to its slab in shared memory, and lane l adds
  row l's products of the chunk.  K = 4, 8 (float32), 2, 4 (float64).
* ``blk``: the same with a block of 128 threads taking 128 rows and one slab (barriers between).
* ``rows2``: 2 lanes a row, 16 rows a warp pass, loops over the row (kfuse's lanes = 2).

    PYTHONPATH=src python docs/experiments/spmv_warp_rows/variants.py out.md   # GPU
"""
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

SOURCE = r"""
template <int K, int R>
__device__ void warp_rows(const int* __restrict__ ptr, const int* __restrict__ idx, const real* __restrict__ val,
                          const real* __restrict__ x, real* __restrict__ y, long long rows, real* slab,
                          long long r0, int lane, int nthreads, int tid) {
    // rows r0 .. r0 + R - 1 by nthreads threads (R == nthreads), the slab of nthreads * K entries
    const long long row = r0 + tid;
    const int b = ptr[row < rows ? row : rows];
    const int e = row < rows ? ptr[row + 1] : b;
    int lo, hi;
    if (nthreads == 32) {
        lo = __shfl_sync(0xffffffffu, b, 0);
        hi = __shfl_sync(0xffffffffu, e, 31);      // rows past the end: empty, at ptr[rows]
    } else {
        lo = ptr[r0 < rows ? r0 : rows];
        const long long end = r0 + R < rows ? r0 + R : rows;
        hi = ptr[end];
    }
    real s = real(0);
    for (int c0 = lo; c0 < hi; c0 += nthreads * K) {
        int c[K];
        real v[K];
#pragma unroll
        for (int u = 0; u < K; ++u) {
            const int k = c0 + tid + nthreads * u;
            c[u] = k < hi ? idx[k] : 0;
            v[u] = k < hi ? val[k] : real(0);
        }
#pragma unroll
        for (int u = 0; u < K; ++u) slab[tid + nthreads * u] = v[u] * __ldg(x + c[u]);
        if (nthreads == 32) __syncwarp(); else __syncthreads();
        const int kb = b > c0 ? b : c0, ke = e < c0 + nthreads * K ? e : c0 + nthreads * K;
        for (int k = kb; k < ke; ++k) s += slab[k - c0];
        if (nthreads == 32) __syncwarp(); else __syncthreads();
    }
    if (row < rows) y[row] = s;
}

template <int K>
__device__ void warp_k(const int* ptr, const int* idx, const real* val, const real* x,
                                              real* y, long long rows) {
    __shared__ real slab[4][32 * K];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long r0 = ((long long)blockIdx.x * 4 + w) * 32;
    if (r0 >= rows) return;   // a whole warp past the end
    warp_rows<K, 32>(ptr, idx, val, x, y, rows, slab[w], r0, lane, 32, lane);
}

template <int K>
__device__ void blk_k(const int* ptr, const int* idx, const real* val, const real* x,
                                             real* y, long long rows) {
    __shared__ real slab[128 * K];
    const long long r0 = (long long)blockIdx.x * 128;
    warp_rows<K, 128>(ptr, idx, val, x, y, rows, slab, r0, threadIdx.x % 32, 128, threadIdx.x);
}

__device__ void rows2(const int* ptr, const int* idx, const real* val, const real* x,
                                             real* y, long long rows) {
    const long long row = ((long long)blockIdx.x * 128 + threadIdx.x) / 2;
    const int lane = threadIdx.x % 2;
    real s = real(0);
    int b = 0, e = 0;
    if (row < rows) { b = ptr[row]; e = ptr[row + 1]; }
    for (int k = b + lane; k < e; k += 2) s += val[k] * __ldg(x + idx[k]);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    if (lane == 0 && row < rows) y[row] = s;
}

extern "C" __global__ void __launch_bounds__(128) warp_a(const int* p, const int* i, const real* v, const real* x, real* y, long long n) { warp_k<KA>(p, i, v, x, y, n); }
extern "C" __global__ void __launch_bounds__(128) warp_b(const int* p, const int* i, const real* v, const real* x, real* y, long long n) { warp_k<KB>(p, i, v, x, y, n); }
extern "C" __global__ void __launch_bounds__(128) blk_a(const int* p, const int* i, const real* v, const real* x, real* y, long long n) { blk_k<KA>(p, i, v, x, y, n); }
extern "C" __global__ void __launch_bounds__(128) rows_2(const int* p, const int* i, const real* v, const real* x, real* y, long long n) { rows2(p, i, v, x, y, n); }
"""


def short_rows(m, longest=1024):
    """The matrix with the entries of its rows longer than ``longest`` dropped (those rows empty):
    kfuse sums such rows in a pre-pass, and a row-per-lane candidate would walk them alone; the
    table compares the mappings of the short rows (every contender runs this matrix)."""
    import dataclasses
    lengths = np.diff(m.indptr).astype(np.int64)
    if lengths.max() <= longest:
        return m
    keep = np.repeat(lengths <= longest, lengths)
    indptr = np.zeros_like(m.indptr)
    np.cumsum(np.where(lengths <= longest, lengths, 0), out=indptr[1:])
    return dataclasses.replace(m, name=m.name + " (rows > 1024 dropped)", indptr=indptr,
                               indices=m.indices[keep], data=m.data[keep])


def timed(cp, fn, reps=15, calls=20):
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / calls)
    return statistics.median(out)


def main(argv):
    import cupy as cp
    import cupyx.scipy.sparse as cps
    import kfuse
    from matrices import matrix_set
    out = Path(argv[0])
    rows = int(argv[1]) if len(argv) > 1 else 10**6
    a = cp.ones(2**27, cp.float64)
    b = cp.empty_like(a)
    bw = 2 * a.nbytes / (timed(cp, lambda: b.__setitem__(slice(None), a), calls=1) * 1e-6)
    del a, b
    lines = [f"copy bandwidth {bw / 1e9:.0f} GB/s; {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; "
             f"{rows} rows, int32 indices, us per call (median of 15 runs of 20 calls)", "",
             "| matrix | dtype | mean row | kfuse | cuSPARSE | warp K1 | warp K2 | block 128 | rows2 | limit |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for dtype in ("float32", "float64"):
        item = np.dtype(dtype).itemsize
        ka, kb = (4, 8) if item == 4 else (2, 4)
        real = "float" if item == 4 else "double"
        mod = cp.RawModule(code=f"typedef {real} real;\n#define KA {ka}\n#define KB {kb}\n" + SOURCE,
                           options=("-std=c++17",))
        fns = {k: mod.get_function(k) for k in ("warp_a", "warp_b", "blk_a", "rows_2")}
        prog = kfuse.compile("csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n", dtype=dtype)
        for m in matrix_set(rows):
            m = short_rows(m.with_index(np.int32))
            n = m.rows
            indptr, indices = cp.asarray(m.indptr), cp.asarray(m.indices)
            data = cp.asarray(m.data).astype(dtype)
            x = cp.random.default_rng(2).standard_normal(n).astype(dtype)
            A = cps.csr_matrix((data, indices, indptr), shape=(m.rows, m.cols))
            ref = A.astype(cp.float64) @ x.astype(cp.float64)
            mag = abs(A.astype(cp.float64)) @ cp.abs(x.astype(cp.float64))
            tol = 1e-4 if item == 4 else 1e-11
            cells = {}
            bound = prog.bind(A=kfuse.CSR(indptr, indices, data, (m.rows, m.cols)), x=x)
            cells["kfuse"] = timed(cp, bound)
            cells["cusparse"] = timed(cp, lambda: A @ x)
            y = cp.full(n, cp.nan, dtype)
            for key, fn, per_block in (("warp K1", fns["warp_a"], 128), ("warp K2", fns["warp_b"], 128),
                                       ("block 128", fns["blk_a"], 128), ("rows2", fns["rows_2"], 64)):
                grid = (-(-n // per_block),)
                args = (indptr, indices, data, x, y, np.int64(n))
                y.fill(cp.nan)
                fn(grid, (128,), args)
                err = float(cp.max(cp.abs(y.astype(cp.float64) - ref) / cp.maximum(mag, 1e-300)))
                t = timed(cp, lambda: fn(grid, (128,), args))
                cells[key] = f"{t:.1f}" + ("" if err < tol else f" (err {err:.0e})")
            nnz = int(m.indptr[-1])
            limit = (nnz * (item + 4) + (n + 1) * 4 + 2 * n * item) / bw * 1e6
            lines.append(f"| {m.name} | {dtype} | {nnz / n:.1f} | {cells['kfuse']:.1f} | {cells['cusparse']:.1f} | "
                         + " | ".join(cells[k] for k in ("warp K1", "warp K2", "block 128", "rows2"))
                         + f" | {limit:.1f} |")
            print(lines[-1], flush=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
