"""Which thread-to-data form streams a matrix sum C = A + B at torch.compile's speed?

kfuse's float32 MADD (n = 8192) runs at 2.92 TB/s of traffic (263 us), its VADD (a vector map of
the same kind) at 2.99 TB/s, torch.compile's MADD at 2.98 (257.8 us). kfuse's matrix maps walk
32 x 32 tiles, a warp moving 4 rows of 128 bytes per instruction. This times hand-written forms on
the same arrays, cold L2 as `kfuse bench` times: a flat vector map (the matrix as one vector), and
tiles of TR rows x W bytes with threads (W / 16) x BY, each thread moving 16 bytes per access
(W = 128 is kfuse's `quad`, W = 512 its gemv `wide` tiles). Peers: kfuse's first plan, torch eager
and torch.compile. Every form is checked against A + B.

    python docs/experiments/madd_forms.py [n ...]
"""
import sys

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

SOURCE = r"""
template <class T> struct Vec16;
template <> struct Vec16<float> { typedef float4 type; };
template <> struct Vec16<double> { typedef double2 type; };

template <class T, int U>
__device__ void flat(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, long nvec) {
    typedef typename Vec16<T>::type V;
    const V* A = reinterpret_cast<const V*>(a); const V* B = reinterpret_cast<const V*>(b);
    V* C = reinterpret_cast<V*>(c);
    long base = (long)blockIdx.x * blockDim.x * U + threadIdx.x;
    V x[U], y[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { long v = base + (long)u * blockDim.x; if (v < nvec) { x[u] = A[v]; y[u] = B[v]; } }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        long v = base + (long)u * blockDim.x;
        if (v < nvec) {
            V z; T* zs = reinterpret_cast<T*>(&z); const T* xs = reinterpret_cast<const T*>(&x[u]);
            const T* ys = reinterpret_cast<const T*>(&y[u]);
#pragma unroll
            for (int e = 0; e < (int)(16 / sizeof(T)); ++e) zs[e] = xs[e] + ys[e];
            C[v] = z;
        }
    }
}

// tile of TR rows x (16 TX) bytes, threads TX x BY; thread (tx, ty) owns rows ty + BY r
template <class T, int TX, int BY, int TR>
__device__ void tile(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int n) {
    typedef typename Vec16<T>::type V;
    constexpr int E = 16 / sizeof(T);
    constexpr int R = TR / BY;
    int col = (blockIdx.x * TX + threadIdx.x) * E;
    int row0 = blockIdx.y * TR + threadIdx.y;
    V x[R], y[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        long o = (long)(row0 + BY * r) * n + col;
        x[r] = *reinterpret_cast<const V*>(a + o); y[r] = *reinterpret_cast<const V*>(b + o);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        long o = (long)(row0 + BY * r) * n + col;
        V z; T* zs = reinterpret_cast<T*>(&z); const T* xs = reinterpret_cast<const T*>(&x[r]);
        const T* ys = reinterpret_cast<const T*>(&y[r]);
#pragma unroll
        for (int e = 0; e < E; ++e) zs[e] = xs[e] + ys[e];
        *reinterpret_cast<V*>(c + o) = z;
    }
}

#define FLAT(T, U) extern "C" __global__ void flat_##T##_##U(const T* a, const T* b, T* c, long nvec) { flat<T, U>(a, b, c, nvec); }
#define TILE(T, TX, BY, TR) extern "C" __global__ void tile_##T##_##TX##_##BY##_##TR(const T* a, const T* b, T* c, int n) { tile<T, TX, BY, TR>(a, b, c, n); }
#define ALL(T) FLAT(T, 1) FLAT(T, 2) FLAT(T, 4) \
  TILE(T, 8, 8, 32) TILE(T, 8, 32, 32) TILE(T, 32, 4, 32) TILE(T, 32, 8, 32) TILE(T, 32, 8, 8) \
  TILE(T, 32, 4, 4) TILE(T, 64, 4, 16) TILE(T, 64, 4, 4) TILE(T, 128, 2, 8) TILE(T, 256, 1, 4) TILE(T, 256, 1, 1)
ALL(float)
ALL(double)
"""

FLAT = [(1, 256), (2, 256), (4, 256), (1, 128), (1, 1024)]
TILES = [(8, 8, 32), (8, 32, 32), (32, 4, 32), (32, 8, 32), (32, 8, 8), (32, 4, 4), (64, 4, 16), (64, 4, 4),
         (128, 2, 8), (256, 1, 4), (256, 1, 1)]


def main(sizes: list[int]) -> None:
    cp = cupy()
    timer = device_timer(reps=30, warmup=3)
    t = lambda f: timer(f)[1]                                    # noqa: E731
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    try:
        import torch
        tadd = torch.compile(lambda a, b: a + b)
    except ImportError:
        torch = None
    for dtype in ("float32", "float64"):
        dt = np.dtype(dtype)
        T = "float" if dtype == "float32" else "double"
        E = 16 // dt.itemsize
        prog = kfuse.compile("examples/madd.kf", dtype=dtype, tuned=False)
        for n in sizes:
            A, B = (cp.random.random((n, n)).astype(dt) + 1 for _ in range(2))
            C = cp.empty_like(A)
            ref = A + B
            limit = 3 * A.nbytes / bw / 1e3
            print(f"{dtype} n = {n}: copy-bandwidth limit {limit:.1f} us", flush=True)
            rows = []

            def run(label, fn):
                C.fill(np.nan)
                got = fn()
                err = float(cp.abs(cp.asarray(C if got is None else got) - ref).max())
                rows.append((label, t(fn), err))

            for U, threads in FLAT:
                k = mod.get_function(f"flat_{T}_{U}")
                nvec = n * n // E
                grid = (nvec + threads * U - 1) // (threads * U)
                run(f"flat, {threads} threads, {U} x 16 B each", lambda k=k, g=grid, th=threads, nv=nvec:
                    k((g,), (th,), (A, B, C, np.int64(nv))))
            for TX, BY, TR in TILES:
                W = 16 * TX
                if n % TR or (n * dt.itemsize) % W:
                    continue
                k = mod.get_function(f"tile_{T}_{TX}_{BY}_{TR}")
                grid = (n * dt.itemsize // W, n // TR)
                run(f"tile {TR} rows x {W} B, threads {TX} x {BY}", lambda k=k, g=grid, tx=TX, by=BY:
                    k(g, (tx, by), (A, B, C, np.int32(n))))
            run("kfuse first plan", lambda: (prog(A=A, B=B, out={"C": C}), None)[1])
            if torch is not None:
                tA, tB, tC = (torch.as_tensor(v, device="cuda") for v in (A, B, C))
                run("torch eager", lambda: (torch.add(tA, tB, out=tC), None)[1])
                run("torch.compile (own result)", lambda: tadd(tA, tB))
            for label, us, err in rows:
                print(f"   {label:40s} {us:8.1f} us  {limit / us * 100:5.1f} % of copy  err {err:.1e}", flush=True)
            del A, B, C, ref
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [8192, 4096])
