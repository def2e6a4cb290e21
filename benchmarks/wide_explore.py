"""Wide tiles by hand: would a BLAS-2 variant over TR x 128 tiles (a warp reading 512 contiguous
bytes of a row, 16 bytes per lane) beat kfuse's 32 x 32 quad tiles on BiCGK?

An exploration (not part of kfuse).  The kernel has the structure kfuse generates: instance
(i, j) = tile (i, j), threads 32 x BY (thread (tx, ty) moves rows ty + BY k, columns 4 tx ..
4 tx + 3), a span of S instances across the loop axis walked by the same threads, a serial loop
along i of ``iters`` tile rows, q's row partials summed over the span and the warp and added once
per row and iteration, s's column partials kept across the loop and added after it, either by
every warp (SS = 0) or once per block after a sum over its warps in shared memory (SS = 1).  The
clear of q and s is a kernel the main kernel is launched dependent on (PDL), as in kfuse.

    python benchmarks/wide_explore.py
"""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.reference import device_case
from kfuse.runtime.launch import PackedArgs, launch_dependent
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parent.parent

SRC = r"""
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ void axpy4(float4& acc, float4 a, float r) {
    acc.x += a.x * r; acc.y += a.y * r; acc.z += a.z * r; acc.w += a.w * r;
}

extern "C" __global__ void clear_pdl(float* a, long long n) {
    asm volatile("griddepcontrol.launch_dependents;");
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        a[i] = 0.f;
}

template <int TR, int BY, int S, int SS>
__global__ void __launch_bounds__(32 * BY) wide(const float* __restrict__ A, const float* __restrict__ p,
    const float* __restrict__ r, float* __restrict__ q, float* __restrict__ s, int n, int n_i, int n_j, int iters)
{
    constexpr int RT = TR / BY;                  // rows per thread
    __shared__ float red[SS ? BY : 1][SS ? 128 * S : 1];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const long long nb_j = (n_j + S - 1) / S;
    const long long b = blockIdx.x;
    const long long first_i = (b / nb_j) * iters, blk_j = (b % nb_j) * S;
    float4 pv[S], sa[S];
#pragma unroll
    for (int v = 0; v < S; ++v) {
        pv[v] = *reinterpret_cast<const float4*>(p + (blk_j + v) * 128 + 4 * tx);
        sa[v] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int it = 0; it < iters; ++it) {
        const long long i = first_i + it;
        if (i >= n_i) break;
        float4 a[S][RT];
        float rv[RT];
#pragma unroll
        for (int v = 0; v < S; ++v)
#pragma unroll
            for (int k = 0; k < RT; ++k)
                a[v][k] = *reinterpret_cast<const float4*>(A + (i * TR + ty + BY * k) * (long long)n + (blk_j + v) * 128 + 4 * tx);
#pragma unroll
        for (int k = 0; k < RT; ++k) rv[k] = r[i * TR + ty + BY * k];
        float qp[RT];
#pragma unroll
        for (int k = 0; k < RT; ++k) qp[k] = 0.f;
#pragma unroll
        for (int v = 0; v < S; ++v)
#pragma unroll
            for (int k = 0; k < RT; ++k) {
                qp[k] += dot4(a[v][k], pv[v]);
                axpy4(sa[v], a[v][k], rv[k]);
            }
#pragma unroll
        for (int k = 0; k < RT; ++k) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) qp[k] += __shfl_xor_sync(0xffffffffu, qp[k], o);
        }
        if (tx < RT) {
            float t = qp[0];
#pragma unroll
            for (int k = 1; k < RT; ++k) if (tx == k) t = qp[k];
            atomicAdd(q + i * TR + ty + BY * tx, t);
        }
    }
    if (SS) {
#pragma unroll
        for (int v = 0; v < S; ++v) *reinterpret_cast<float4*>(&red[SS ? ty : 0][128 * v + 4 * tx]) = sa[v];
        __syncthreads();
        for (int c = threadIdx.x; c < 128 * S; c += 32 * BY) {
            float t = 0.f;
#pragma unroll
            for (int w = 0; w < BY; ++w) t += red[SS ? w : 0][SS ? c : 0];
            atomicAdd(s + blk_j * 128 + c, t);
        }
    } else {
#pragma unroll
        for (int v = 0; v < S; ++v) {
            float* d = s + (blk_j + v) * 128 + 4 * tx;
            atomicAdd(d, sa[v].x); atomicAdd(d + 1, sa[v].y); atomicAdd(d + 2, sa[v].z); atomicAdd(d + 3, sa[v].w);
        }
    }
}
"""

CONFIGS = [(TR, BY, S, SS) for TR in (8, 16, 32) for BY in (2, 4, 8) for S in (1, 2, 4) for SS in (0, 1)
           if TR % BY == 0 and (TR // BY) * S <= 16 and TR // BY <= 32]


def rel(a, ref):
    a = cp.asnumpy(a).astype(np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def main():
    n = 8192
    timer = device_timer(reps=30, warmup=5)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s; read of one 8192^2 float32 matrix at it: {n * n * 4 / bw / 1e3:.1f} us "
          f"(95 %: {n * n * 4 / bw / 1e3 / 0.95:.1f})", flush=True)
    names = [f"wide<{TR},{BY},{S},{SS}>" for TR, BY, S, SS in CONFIGS]
    mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=names)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    p, r = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    A64 = A.astype(np.float64)
    q_ref, s_ref = A64 @ p, A64.T @ r
    dA, dp, dr = cp.asarray(A), cp.asarray(p), cp.asarray(r)
    qs = cp.empty(2 * n, dtype=np.float32)
    q, s = qs[:n], qs[n:]
    clear = mod.get_function("clear_pdl")

    base = kfuse.compile(ROOT / "examples" / "bicgk.kf", tuned=False)
    dev, _, _ = device_case(base.program, {d.id: n for d in base.program.dims}, "float32", 0)
    print(f"kfuse BiCGK first choice (fill + kernel, PDL): {timer(base.bind(**dev)):.1f} us", flush=True)

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    results = []
    for (TR, BY, S, SS), name in zip(CONFIGS, names):
        f = mod.get_function(name)
        n_i, n_j = n // TR, n // 128
        nb_j = -(-n_j // S)
        for iters in (1, 2, 4, 8, 16):
            grid = nb_j * -(-n_i // iters)
            if grid < sms:
                continue
            packed = PackedArgs((dA, dp, dr, q, s, np.int32(n), np.int32(n_i), np.int32(n_j), np.int32(iters)))

            def call():
                clear((64,), (256,), (qs, np.int64(2 * n)))
                launch_dependent(f, grid, 32 * BY, packed, "wide")
            qs[:] = np.nan
            call()
            err = max(rel(q, q_ref), rel(s, s_ref))
            t = timer(call)
            results.append((t, TR, BY, S, SS, iters, grid, err))
    results.sort()
    print("wide tiles, clear + kernel (PDL), best 30: us  TR BY S SS iters grid  error")
    for t, TR, BY, S, SS, iters, grid, err in results[:30]:
        print(f"  {t:6.1f}  TR{TR} BY{BY} S{S} SS{SS} it{iters} grid {grid}  err {err:.1e}")
    print("best per (SS, TR):")
    for SS in (0, 1):
        for TR in (8, 16, 32):
            best = min((x for x in results if x[4] == SS and x[1] == TR), default=None)
            if best:
                print(f"  SS{SS} TR{TR}: {best[0]:.1f} us (BY{best[2]} S{best[3]} it{best[5]})")
    bad = [x for x in results if not x[7] < 1e-5]
    print(f"{len(bad)} configurations wrong" if bad else "all configurations correct (rel. error < 1e-5)")


if __name__ == "__main__":
    sys.exit(main())
