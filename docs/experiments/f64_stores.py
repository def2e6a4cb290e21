"""float64 map kernels by hand: which 16-byte access layout streams at the copy bandwidth?

kfuse's `quad` mapping gives each thread 4 consecutive entries; in float64 that is two 16-byte
accesses per thread (p and p + 16), so each store instruction of a warp writes half of every 32-byte
sector it touches (the other half comes with the next instruction).  Timed here, SSCAL and WAXPBY in
float64 (N = 2^26 and 2^24, cold L2 as in `kfuse bench`), one instance (32 entries) per 8 threads:

  quad      today's kf_store16: st.v2 at p, st.v2 at p + 16 (each instruction: half sectors)
  pairx     the same registers; lanes 2m and 2m+1 swap halves through one shuffle per double, so
            each st.v2 instruction of the pair writes one whole 32-byte sector
  pairg     pairx for any caller: pairs formed at run time (__activemask, addresses compared),
            else today's stores
  pair      thread t owns entries 2t, 2t+1 and 2t+64, 2t+65 of a 128-entry warp piece (Triton's
            layout: each instruction covers 512 contiguous bytes)
  warp      one entry per thread (kfuse's `warp` mapping, 1024-thread blocks)

beside cupy.copyto, torch eager and torch.compile.  Run: PYTHONPATH=src python3 f64_stores.py
"""
import sys

import cupy as cp
import numpy as np

from kfuse.runtime.timing import quartiles_us

SRC = r"""
__device__ __forceinline__ void st2(double* p, double a, double b) {
    asm volatile("st.global.v2.f64 [%0], {%1, %2};" :: "l"(p), "d"(a), "d"(b) : "memory");
}
__device__ __forceinline__ void ld4(const double* p, double (&v)[4]) {
    const double2 a = reinterpret_cast<const double2*>(p)[0];
    const double2 b = reinterpret_cast<const double2*>(p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
// v holds entries e..e+3 of this lane; store them with whole sectors per instruction.  Lanes 2m
// and 2m+1 (entries e..e+3 and e+4..e+7) swap halves; no branch, so both lanes of a pair store in
// the same instruction: the first writes e..e+3 (even: its own v0 v1, odd: the even lane's v2 v3),
// the second e+4..e+7.
__device__ __forceinline__ void st4x(double* p, const double (&v)[4]) {
    const bool odd = threadIdx.x & 1;
    const double s0 = odd ? v[0] : v[2], s1 = odd ? v[1] : v[3];
    const double r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
    st2(odd ? p - 2 : p, odd ? r0 : v[0], odd ? r1 : v[1]);
    st2(odd ? p + 2 : p + 4, odd ? v[2] : r0, odd ? v[3] : r1);
}
// the same for any caller: pairs only where both lanes are here, adjacent and aligned, else
// today's two half-sector stores
__device__ __forceinline__ void st4g(double* p, const double (&v)[4], bool ok) {
    const unsigned active = __activemask();
    unsigned pairs = active & (active >> 1) & 0x55555555u;
    pairs |= pairs << 1;
    unsigned lane; asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    if ((pairs >> lane) & 1u) {
        const bool odd = lane & 1;
        const unsigned long long me = reinterpret_cast<unsigned long long>(p);
        const unsigned long long other = __shfl_xor_sync(pairs, me, 1);
        const bool both = __shfl_xor_sync(pairs, ok, 1) && ok && other == (odd ? me - 32 : me + 32);
        const double s0 = odd ? v[0] : v[2], s1 = odd ? v[1] : v[3];
        const double r0 = __shfl_xor_sync(pairs, s0, 1), r1 = __shfl_xor_sync(pairs, s1, 1);
        if (both) {
            st2(odd ? p - 2 : p, odd ? r0 : v[0], odd ? r1 : v[1]);
            st2(odd ? p + 2 : p + 4, odd ? v[2] : r0, odd ? v[3] : r1);
            return;
        }
    }
    if (ok) { st2(p, v[0], v[1]); st2(p + 2, v[2], v[3]); }
}
extern "C" __global__ void scal_quad(const double* x, double* y, double a, long long n) {
    long long e = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (e + 4 > n) return;
    double v[4]; ld4(x + e, v);
    st2(y + e, a * v[0], a * v[1]); st2(y + e + 2, a * v[2], a * v[3]);
}
extern "C" __global__ void scal_pairx(const double* x, double* y, double a, long long n) {
    long long e = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (e + 4 > n) return;          // n is a multiple of 8 here: whole pairs return together
    double v[4]; ld4(x + e, v);
    for (int k = 0; k < 4; ++k) v[k] *= a;
    st4x(y + e, v);
}
extern "C" __global__ void scal_pair(const double* x, double* y, double a, long long n) {
    const long long base = ((long long)blockIdx.x * blockDim.x + (threadIdx.x & ~31)) * 4;
    const int l = threadIdx.x & 31;
    const long long e0 = base + 2 * l, e1 = base + 64 + 2 * l;
    if (e1 + 2 > n) return;
    const double2 p = reinterpret_cast<const double2*>(x + e0)[0];
    const double2 q = reinterpret_cast<const double2*>(x + e1)[0];
    st2(y + e0, a * p.x, a * p.y); st2(y + e1, a * q.x, a * q.y);
}
extern "C" __global__ void scal_pairg(const double* x, double* y, double a, long long n) {
    long long e = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    const bool ok = e + 4 <= n;
    double v[4] = {0, 0, 0, 0};
    if (ok) ld4(x + e, v);
    for (int k = 0; k < 4; ++k) v[k] *= a;
    st4g(y + e, v, ok);
}
extern "C" __global__ void waxpby_pairg(const double* x, const double* z, double* y, double a, double b, long long n) {
    long long e = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    const bool ok = e + 4 <= n;
    double v[4] = {0, 0, 0, 0}, w[4] = {0, 0, 0, 0};
    if (ok) { ld4(x + e, v); ld4(z + e, w); }
    for (int k = 0; k < 4; ++k) v[k] = a * v[k] + b * w[k];
    st4g(y + e, v, ok);
}
extern "C" __global__ void scal_warp(const double* x, double* y, double a, long long n) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) y[e] = a * x[e];
}
extern "C" __global__ void waxpby_quad(const double* x, const double* z, double* y, double a, double b, long long n) {
    long long e = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (e + 4 > n) return;
    double v[4], w[4]; ld4(x + e, v); ld4(z + e, w);
    st2(y + e, a * v[0] + b * w[0], a * v[1] + b * w[1]); st2(y + e + 2, a * v[2] + b * w[2], a * v[3] + b * w[3]);
}
extern "C" __global__ void waxpby_pairx(const double* x, const double* z, double* y, double a, double b, long long n) {
    long long e = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (e + 4 > n) return;
    double v[4], w[4]; ld4(x + e, v); ld4(z + e, w);
    for (int k = 0; k < 4; ++k) v[k] = a * v[k] + b * w[k];
    st4x(y + e, v);
}
extern "C" __global__ void waxpby_pair(const double* x, const double* z, double* y, double a, double b, long long n) {
    const long long base = ((long long)blockIdx.x * blockDim.x + (threadIdx.x & ~31)) * 4;
    const int l = threadIdx.x & 31;
    const long long e0 = base + 2 * l, e1 = base + 64 + 2 * l;
    if (e1 + 2 > n) return;
    const double2 p = reinterpret_cast<const double2*>(x + e0)[0], q = reinterpret_cast<const double2*>(x + e1)[0];
    const double2 r = reinterpret_cast<const double2*>(z + e0)[0], s = reinterpret_cast<const double2*>(z + e1)[0];
    st2(y + e0, a * p.x + b * r.x, a * p.y + b * r.y); st2(y + e1, a * q.x + b * s.x, a * q.y + b * s.y);
}
extern "C" __global__ void waxpby_warp(const double* x, const double* z, double* y, double a, double b, long long n) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) y[e] = a * x[e] + b * z[e];
}
"""


def med(fn) -> float:
    return quartiles_us(fn, reps=50, warmup=5, cold_l2=True).median


def main() -> None:
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    import torch
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    for N in (2**26, 2**24):
        x, z = cp.random.rand(N), cp.random.rand(N)
        y = cp.full(N, np.nan)
        a, b = 1.7, -0.3
        t_copy = med(lambda: cp.copyto(y, x))
        bw = 2 * x.nbytes / t_copy / 1e3
        print(f"N = 2^{N.bit_length() - 1}: copy {t_copy:.1f} us ({bw:.0f} GB/s)")
        for name, ipb_threads in (("quad", 256), ("pairx", 256), ("pairg", 256), ("pair", 256), ("warp", 1024)):
            per = 1 if name == "warp" else 4
            grid = N // (per * ipb_threads)
            for seq, args, ref in (("scal", (x, y, np.float64(a)), a * x),
                                   ("waxpby", (x, z, y, np.float64(a), np.float64(b)), a * x + b * z)):
                f = mod.get_function(f"{seq}_{name}")
                y.fill(np.nan)
                f((grid,), (ipb_threads,), args + (np.int64(N),))
                cp.cuda.runtime.deviceSynchronize()
                err = float(cp.max(cp.abs(y - ref)))
                if not err < 1e-12:
                    sys.exit(f"{seq}_{name}: wrong result (max error {err})")
                t = med(lambda: f((grid,), (ipb_threads,), args + (np.int64(N),)))
                traffic = (2 if seq == "scal" else 3) * x.nbytes
                print(f"  {seq:7s} {name:6s} {t:8.1f} us  {traffic / t / 1e3 / bw * 100:5.1f} % of copy")
        tx, tz = torch.as_tensor(x, device="cuda"), torch.as_tensor(z, device="cuda")
        for seq, fn, nb in (("scal", lambda p, q: a * p, 2), ("waxpby", lambda p, q: a * p + b * q, 3)):
            comp = torch.compile(fn)
            comp(tx, tz)
            for peer, g in (("eager", fn), ("compile", comp)):
                t = med(lambda: g(tx, tz))
                print(f"  {seq:7s} torch {peer:8s} {t:8.1f} us  {nb * x.nbytes / t / 1e3 / bw * 100:5.1f} % of copy")
        del x, z, y, tx, tz
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
