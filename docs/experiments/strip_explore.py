"""Hand-written row-strip kernels for BiCGK, SGEMV and GEMVER's first kernel, beside kfuse's.

An exploration (not part of kfuse): what a strip of R rows x C columns per block, 16-byte
loads, several rows in flight per warp, reaches on the GPU, and what programmatic dependent
launch (a clear kernel that lets the main kernel start at once, the main kernel waiting for
it only before its first atomic) saves against a memset before the kernel.

    python docs/experiments/strip_explore.py
"""
import itertools
import sys
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.reference import device_case
from kfuse.runtime.launch import PackedArgs, launch_dependent
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)

SRC = r"""
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ void axpy4(float4& acc, float4 a, float r) {
    acc.x += a.x * r; acc.y += a.y * r; acc.z += a.z * r; acc.w += a.w * r;
}

// The block's column partials (K float4 per lane, one set per warp) summed over its W warps
// through shared memory, then added once per column to out[base ..]
template <int K, int W>
__device__ __forceinline__ void block_colsum_add(float (&red)[W][128 * K], const float4 (&part)[K],
                                                 float* __restrict__ out, long long base) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int m = 0; m < K; ++m)
        *reinterpret_cast<float4*>(&red[warp][128 * m + 4 * lane]) = part[m];
    __syncthreads();
    for (int c = threadIdx.x; c < 128 * K; c += 32 * W) {
        float t = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w) t += red[w][c];
        atomicAdd(out + base + c, t);
    }
}

extern "C" __global__ void clear_pdl(float* a, long long n) {
    asm volatile("griddepcontrol.launch_dependents;");
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        a[i] = 0.f;
}

// q = A p (DO_Q), s = A^T r (DO_S) on a strip of R rows x 128 K columns per block, W warps;
// each warp takes RU rows at a time.  WAIT: 0 no griddepcontrol.wait, 1 before the loop, 2 before
// the first atomic of s (q atomics then come before it: only valid without a q clear).
template <int K, int W, int RU, bool DO_Q, bool DO_S, int WAIT>
__global__ void __launch_bounds__(32 * W) strip(const float* __restrict__ A, const float* __restrict__ p,
    const float* __restrict__ r, float* __restrict__ q, float* __restrict__ s, int n, int R)
{
    __shared__ float red[W][DO_S ? 128 * K : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long c0 = (long long)blockIdx.x * (128 * K) + 4 * lane;
    const int r0 = blockIdx.y * R, r1 = min(n, r0 + R);
    float4 pv[K], sa[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
        if (DO_Q) pv[m] = *reinterpret_cast<const float4*>(p + c0 + 128 * m);
        sa[m] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (WAIT == 1) asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int row = r0 + warp * RU; row < r1; row += W * RU) {
        float4 a[RU][K];
        float rv[RU];
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            if (DO_S) rv[u] = r[row + u];
#pragma unroll
            for (int m = 0; m < K; ++m)
                a[u][m] = *reinterpret_cast<const float4*>(A + (long long)(row + u) * n + c0 + 128 * m);
        }
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            if (DO_Q) {
                float t = 0.f;
#pragma unroll
                for (int m = 0; m < K; ++m) t += dot4(a[u][m], pv[m]);
                t = warp_sum(t);
                if (lane == 0) {
                    if (gridDim.x == 1) q[row + u] = t; else atomicAdd(q + row + u, t);
                }
            }
            if (DO_S) {
#pragma unroll
                for (int m = 0; m < K; ++m) axpy4(sa[m], a[u][m], rv[u]);
            }
        }
    }
    if (WAIT == 2) asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (DO_S) block_colsum_add<K, W>(red, sa, s, (long long)blockIdx.x * 128 * K);
}

// The layout kfuse would generate with P instances side by side (interleaved by 8 lanes) and
// a span S walked by the same threads: rows (w + 8 k) of each 32-row tile (RS = 8), q summed
// over QG lanes (8: one atomic per 8-lane group, i.e. per instance; 32: per warp).
template <int K, int RS, int QG>
__global__ void __launch_bounds__(256) strip8(const float* __restrict__ A, const float* __restrict__ p,
    const float* __restrict__ r, float* __restrict__ q, float* __restrict__ s, int n, int R)
{
    constexpr int W = 8, RU = 4;
    __shared__ float red[W][128 * K];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long c0 = (long long)blockIdx.x * (128 * K) + 4 * lane;
    const int r0 = blockIdx.y * R, r1 = min(n, r0 + R);
    float4 pv[K], sa[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
        pv[m] = *reinterpret_cast<const float4*>(p + c0 + 128 * m);
        sa[m] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int base = r0; base < r1; base += W * RU) {        // one 32-row tile row per step
        float4 a[RU][K];
        float rv[RU];
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            const int row = base + (RS == 8 ? warp + 8 * u : warp * RU + u);
            rv[u] = r[row];
#pragma unroll
            for (int m = 0; m < K; ++m)
                a[u][m] = *reinterpret_cast<const float4*>(A + (long long)row * n + c0 + 128 * m);
        }
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            const int row = base + (RS == 8 ? warp + 8 * u : warp * RU + u);
            float t = 0.f;
#pragma unroll
            for (int m = 0; m < K; ++m) t += dot4(a[u][m], pv[m]);
#pragma unroll
            for (int o = QG / 2; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
            if (lane % QG == 0) atomicAdd(q + row, t);
#pragma unroll
            for (int m = 0; m < K; ++m) axpy4(sa[m], a[u][m], rv[u]);
        }
    }
    block_colsum_add<K, W>(red, sa, s, (long long)blockIdx.x * 128 * K);
}

// GEMVER's first kernel: B = A + u1 v1^T + u2 v2^T, x = b B^T y + z (x cleared first)
template <int K, int W, int RU, bool CS>
__global__ void __launch_bounds__(32 * W) gemver0(const float* __restrict__ A, const float* __restrict__ u1,
    const float* __restrict__ v1, const float* __restrict__ u2, const float* __restrict__ v2,
    const float* __restrict__ y, const float* __restrict__ z, float b, float* __restrict__ B,
    float* __restrict__ x, int n, int R)
{
    __shared__ float red[W][128 * K];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long c0 = (long long)blockIdx.x * (128 * K) + 4 * lane;
    const int r0 = blockIdx.y * R, r1 = min(n, r0 + R);
    float4 w1[K], w2[K], xa[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
        w1[m] = *reinterpret_cast<const float4*>(v1 + c0 + 128 * m);
        w2[m] = *reinterpret_cast<const float4*>(v2 + c0 + 128 * m);
        xa[m] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int row = r0 + warp * RU; row < r1; row += W * RU) {
        float4 a[RU][K];
        float a1[RU], a2[RU], yy[RU];
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            a1[u] = u1[row + u]; a2[u] = u2[row + u]; yy[u] = y[row + u];
#pragma unroll
            for (int m = 0; m < K; ++m)
                a[u][m] = *reinterpret_cast<const float4*>(A + (long long)(row + u) * n + c0 + 128 * m);
        }
#pragma unroll
        for (int u = 0; u < RU; ++u) {
#pragma unroll
            for (int m = 0; m < K; ++m) {
                float4 v = a[u][m];
                v.x += a1[u] * w1[m].x + a2[u] * w2[m].x;
                v.y += a1[u] * w1[m].y + a2[u] * w2[m].y;
                v.z += a1[u] * w1[m].z + a2[u] * w2[m].z;
                v.w += a1[u] * w1[m].w + a2[u] * w2[m].w;
                float* dst = B + (long long)(row + u) * n + c0 + 128 * m;
                if (CS) asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
                else asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
                axpy4(xa[m], v, yy[u]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < K; ++m)
        *reinterpret_cast<float4*>(&red[warp][128 * m + 4 * lane]) = xa[m];
    __syncthreads();
    for (int c = threadIdx.x; c < 128 * K; c += 32 * W) {
        float t = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w) t += red[w][c];
        const long long e = (long long)blockIdx.x * 128 * K + c;
        atomicAdd(x + e, b * t + (blockIdx.y == 0 ? z[e] : 0.f));
    }
}
"""

STRIP = [(K, W, RU) for K in (1, 2, 4) for W in (4, 8) for RU in (1, 2, 4) if K * RU <= 8]
NAMES = ([f"strip<{K},{W},{RU},true,true,0>" for K, W, RU in STRIP]
         + [f"strip<{K},{W},{RU},true,true,1>" for K, W, RU in STRIP]
         + [f"strip<{K},{W},{RU},false,true,2>" for K, W, RU in STRIP]
         + [f"strip<{K},{W},{RU},true,false,0>" for K, W, RU in STRIP]
         + [f"gemver0<{K},{W},{RU},{cs}>" for K, W, RU in STRIP for cs in ("false", "true")]
         + [f"strip8<{K},{RS},{QG}>" for K in (1, 2, 4) for RS in (1, 8) for QG in (8, 32)])


def rel(a, ref):
    a = cp.asnumpy(a).astype(np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def bicgk_case(n, rng):
    """BiCGK's data: A (float64 copy kept for references), p and r on the device, q and s side by
    side in one buffer (one clear covers both), and the float64 references of q = A p, s = A^T r."""
    A = rng.standard_normal((n, n)).astype(np.float32)
    p, r = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    A64 = A.astype(np.float64)
    return (A64, cp.asarray(A), cp.asarray(p), cp.asarray(r), cp.empty(2 * n, dtype=np.float32),
            A64 @ p, A64.T @ r)


def layout_only():
    """Only the layout experiment (strip8) beside the best strip, BiCGK, memset + kernel."""
    n = 8192
    mod = cp.RawModule(code=SRC, options=("-std=c++17",),
                       name_expressions=[f"strip8<{K},{RS},{QG}>" for K in (1, 2, 4) for RS in (1, 8) for QG in (8, 32)]
                       + ["strip<4,8,2,true,true,0>"])
    rng = np.random.default_rng(0)
    _, dA, dp, dr, qs, q_ref, s_ref = bicgk_case(n, rng)
    q, s = qs[:n], qs[n:]
    print("strip8 layouts (memset + kernel us): K RS QG R")
    rows = []
    for K in (1, 2, 4):
        for RS in (1, 8):
            for QG in (8, 32):
                for R in (32, 64, 128, 256):
                    f = mod.get_function(f"strip8<{K},{RS},{QG}>")
                    grid = (n // (128 * K), n // R)
                    args = (dA, dp, dr, q, s, np.int32(n), np.int32(R))
                    qs[:] = np.nan
                    qs.data.memset_async(0, qs.nbytes)
                    f(grid, (256,), args)
                    err = max(rel(q, q_ref), rel(s, s_ref))
                    t = median_us(lambda: (qs.data.memset_async(0, qs.nbytes), f(grid, (256,), args)), reps=30)
                    rows.append((t, K, RS, QG, R, err))
    f = mod.get_function("strip<4,8,2,true,true,0>")
    args = (dA, dp, dr, q, s, np.int32(n), np.int32(64))
    t = median_us(lambda: (qs.data.memset_async(0, qs.nbytes), f((16, 128), (256,), args)), reps=30)
    print(f"  reference strip K4 W8 RU2 R64: {t:.1f}")
    for t, K, RS, QG, R, err in sorted(rows):
        print(f"  {t:6.1f}  K{K} RS{RS} QG{QG} R{R}  err {err:.1e}", flush=True)


def main():
    n = 8192
    bw = copy_bandwidth(2**30, device_timer(reps=20, warmup=5))
    print(f"copy bandwidth: {bw:.0f} GB/s; read of one 8192^2 float32 matrix at it: {n * n * 4 / bw / 1e3:.1f} us",
          flush=True)
    mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=NAMES)
    rng = np.random.default_rng(0)
    A64, dA, dp, dr, qs, q_ref, s_ref = bicgk_case(n, rng)
    q, s = qs[:n], qs[n:]
    clear = mod.get_function("clear_pdl")

    # kfuse's BiCGK, its first 10 plans: whole call and kernel alone
    base = kfuse.compile(ROOT / "examples" / "bicgk.kf", tuned=False)
    prog = base.program
    dims = {d.id: n for d in prog.dims}
    dev, _, outs = device_case(prog, dims, "float32", 0)
    print("kfuse BiCGK plans (call: its clear, the kernel launched dependent on it | kernel alone):")
    for i, plan in enumerate(itertools.islice(base.search.plans(), 10)):
        c = base.with_plan(plan)
        bound = c.bind(**dev)
        L = bound.binding.kernel_launches[0]
        t_all = median_us(bound, reps=50)          # the call patched L's arguments
        t_k = median_us(lambda: L.launch(cp.cuda.get_current_stream().ptr), reps=50)
        k = plan.kernels[0]
        print(f"  plan {i}: {t_all:6.1f} | {t_k:6.1f} us  {k.loop} U{k.unroll} S{k.span} "
              + " ".join(f"{kc.variant.name}{dict(kc.macros).get('BY', '')}" for kc in k.calls), flush=True)
    t_memset = median_us(lambda: qs.data.memset_async(0, qs.nbytes), reps=50)
    t_clear = median_us(lambda: clear((64,), (256,), (qs, np.int64(2 * n))), reps=50)
    print(f"memset of 64 KB alone: {t_memset:.1f} us; clear kernel alone: {t_clear:.1f} us", flush=True)

    results = []
    for K, W, RU in STRIP:
        for R in (64, 128, 256, 512, 1024):
            if R % (W * RU):
                continue
            grid = (n // (128 * K), n // R)
            args = (dA, dp, dr, q, s, np.int32(n), np.int32(R))
            f0 = mod.get_function(f"strip<{K},{W},{RU},true,true,0>")
            f1 = mod.get_function(f"strip<{K},{W},{RU},true,true,1>")
            qs[:] = np.nan
            qs.data.memset_async(0, qs.nbytes)
            f0(grid, (32 * W,), args)
            eq, es = rel(q, q_ref), rel(s, s_ref)
            t_k = median_us(lambda: f0(grid, (32 * W,), args), reps=30)
            t_m = median_us(lambda: (qs.data.memset_async(0, qs.nbytes), f0(grid, (32 * W,), args)), reps=30)

            packed = PackedArgs(args)

            def pdl_call():
                clear((64,), (256,), (qs, np.int64(2 * n)))
                launch_dependent(f1, grid, 32 * W, packed, "strip")
            qs[:] = np.nan
            pdl_call()
            ep, es2 = rel(q, q_ref), rel(s, s_ref)
            t_p = median_us(pdl_call, reps=30)
            results.append((t_m, t_k, t_p, K, W, RU, R, max(eq, es, ep, es2)))
    results.sort()
    print("BiCGK strips, best 25 by (memset + kernel): memset+kernel | kernel | PDL clear+kernel us; K W RU R; error")
    for t_m, t_k, t_p, K, W, RU, R, err in results[:25]:
        print(f"  {t_m:6.1f} | {t_k:6.1f} | {t_p:6.1f}   K{K} W{W} RU{RU} R{R}  err {err:.1e}")
    best_pdl = min(results, key=lambda x: x[2])
    print(f"  best PDL: {best_pdl[2]:.1f} us K{best_pdl[3]} W{best_pdl[4]} RU{best_pdl[5]} R{best_pdl[6]}", flush=True)

    # SGEMV alone (q only, no atomics when one block spans the row is impossible here: atomics on q)
    res = []
    for K, W, RU in STRIP:
        for R in (32, 64, 128, 256):
            if R % (W * RU):
                continue
            grid = (n // (128 * K), n // R)
            f = mod.get_function(f"strip<{K},{W},{RU},true,false,0>")
            args = (dA, dp, dr, q, s, np.int32(n), np.int32(R))
            q[:] = 0
            f(grid, (32 * W,), args)
            err = rel(q, q_ref)
            res.append((median_us(lambda: f(grid, (32 * W,), args), reps=30), K, W, RU, R, err))
    res.sort()
    print("SGEMV strips (kernel alone, q atomics), best 8:")
    for t_k, K, W, RU, R, err in res[:8]:
        print(f"  {t_k:6.1f}   K{K} W{W} RU{RU} R{R}  err {err:.1e}")

    # GEMVER kernel 0 by hand, against kfuse's kernel 0
    base = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)
    prog = base.program
    dev, _, outs = device_case(prog, {d.id: n for d in prog.dims}, "float32", 0)
    bound = base.bind(**dev)
    bound()                                        # patches the launches' arguments
    for L in bound.binding.kernel_launches:
        t_k = median_us(lambda: L.launch(cp.cuda.get_current_stream().ptr), reps=30)
        print(f"kfuse GEMVER {L.name}: {t_k:.1f} us alone (grid {L.grid}, {L.threads} threads)", flush=True)
    print(f"kfuse GEMVER whole: {median_us(bound, reps=30):.1f} us")
    u1, v1, u2, v2, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(6))
    bs = np.float32(0.7)
    B_ref = A64 + np.outer(u1, v1) + np.outer(u2, v2)
    x_ref = 0.7 * (B_ref.T @ y) + z
    d = [cp.asarray(v) for v in (u1, v1, u2, v2, y, z)]
    dB = cp.empty_like(dA)
    x = cp.empty(n, dtype=np.float32)
    res = []
    for K, W, RU in STRIP:
        for R in (64, 128, 256, 512):
            if R % (W * RU):
                continue
            for cs in ("false", "true"):
                f = mod.get_function(f"gemver0<{K},{W},{RU},{cs}>")
                grid = (n // (128 * K), n // R)
                args = (dA, *d, bs, dB, x, np.int32(n), np.int32(R))
                x[:] = 0
                f(grid, (32 * W,), args)
                err = max(rel(x, x_ref), rel(dB[::97], B_ref[::97]))
                res.append((median_us(lambda: f(grid, (32 * W,), args), reps=20), K, W, RU, R, cs, err))
    res.sort()
    print("GEMVER kernel 0 strips (kernel alone), best 10:")
    for t_k, K, W, RU, R, cs, err in res[:10]:
        print(f"  {t_k:6.1f}   K{K} W{W} RU{RU} R{R} cs={cs}  err {err:.1e}")


if __name__ == "__main__":
    sys.exit(layout_only() if "--layout" in sys.argv else main())
