"""Do vector maps want larger blocks?  float32 SSCAL, WAXPBY (and MADD) run 1-1.3 % behind
torch.compile in the untuned bench (N = 2^26); kfuse runs a map as `quad` instances of 8 threads,
8 or 32 per block (64 or 256 threads), one instance per thread slot.

This times hand-written flat maps out = sum_k c_k x_k of K = 1, 2, 3 inputs (SSCAL-, WAXPBY- and
VADD-like traffic) with blocks of 64 to 1024 threads and one or two 16-byte vectors per thread and
array, beside the model's top plans of the matching example (its instances per block and serial
iterations) and torch.compile, on the same arrays, cold L2 as `kfuse bench` times (median of 30).
Every form is checked against float64.

    python docs/experiments/map_blocks.py [--sizes 67108864 16777216] [--dtypes float32 float64]
"""
import argparse
from dataclasses import replace

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

SOURCE = r"""
template <class T> struct Vec16;
template <> struct Vec16<float> { typedef float4 type; };
template <> struct Vec16<double> { typedef double2 type; };

// out = c0 x0 + c1 x1 + c2 x2 (the first K), U 16-byte vectors per thread and array, the
// block's vectors consecutive: block b owns vectors [b U T, (b + 1) U T)
template <class T, int K, int U>
__device__ void flat(const T* __restrict__ x0, const T* __restrict__ x1, const T* __restrict__ x2,
                     T* __restrict__ out, T c0, T c1, T c2, long nvec) {
    typedef typename Vec16<T>::type V;
    constexpr int E = 16 / sizeof(T);
    const T* xs[3] = {x0, x1, x2};
    const T cs[3] = {c0, c1, c2};
    long base = (long)blockIdx.x * blockDim.x * U + threadIdx.x;
    V v[K][U];
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
        for (int u = 0; u < U; ++u) {
            long i = base + (long)u * blockDim.x;
            if (i < nvec) v[k][u] = reinterpret_cast<const V*>(xs[k])[i];
        }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        long i = base + (long)u * blockDim.x;
        if (i < nvec) {
            V z;
            T* zs = reinterpret_cast<T*>(&z);
#pragma unroll
            for (int e = 0; e < E; ++e) {
                T s = 0;
#pragma unroll
                for (int k = 0; k < K; ++k) s += cs[k] * reinterpret_cast<const T*>(&v[k][u])[e];
                zs[e] = s;
            }
            reinterpret_cast<V*>(out)[i] = z;
        }
    }
}

#define FLAT(T, K, U) extern "C" __global__ void flat_##T##_##K##_##U(const T* x0, const T* x1, const T* x2, \
    T* out, T c0, T c1, T c2, long nvec) { flat<T, K, U>(x0, x1, x2, out, c0, c1, c2, nvec); }
#define ALL(T) FLAT(T, 1, 1) FLAT(T, 1, 2) FLAT(T, 2, 1) FLAT(T, 2, 2) FLAT(T, 3, 1) FLAT(T, 3, 2)
ALL(float)
ALL(double)
"""

EXAMPLE = {1: "sscal", 2: "waxpby", 3: "vadd"}
THREADS = (64, 128, 256, 512, 1024)


def describe(plan) -> str:
    return "; ".join(f"{'+'.join(kc.variant.name for kc in k.calls)} ipb {k.ipb}"
                     + (f" I{k.iters}" if k.iters else "") for k in plan.kernels)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2**26, 2**24])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--top", type=int, default=6)
    args = ap.parse_args()
    cp = cupy()
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s; times in us (median of 30, cold L2), % of the copy bandwidth", flush=True)
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    import torch
    for dtype in args.dtypes:
        dt = np.dtype(dtype)
        T = "float" if dtype == "float32" else "double"
        E = 16 // dt.itemsize
        for N in args.sizes:
            for K in (1, 2, 3):
                xs = [cp.random.random(N).astype(dt) + 1 for _ in range(3)]
                cs = [dt.type(0.5), dt.type(-1.25)] if K < 3 else [dt.type(1)] * 3
                cs += [dt.type(0)] * (3 - len(cs))
                out = cp.empty(N, dtype=dt)
                ref = sum(float(cs[k]) * xs[k].astype(cp.float64) for k in range(K))
                limit = (K + 1) * N * dt.itemsize / bw / 1e3
                rows = []

                def run(label, fn, result=lambda: out):
                    out.fill(np.nan)
                    fn()
                    got = cp.asarray(result()).astype(cp.float64)
                    err = float(cp.max(cp.abs(got - ref) / cp.abs(ref)))
                    assert err < (1e-5 if dtype == "float32" else 1e-12), (label, err)
                    rows.append((label, timer(fn)[1]))

                nvec = N // E
                for U in (1, 2):
                    k = mod.get_function(f"flat_{T}_{K}_{U}")
                    for th in THREADS:
                        grid = (nvec + th * U - 1) // (th * U)
                        run(f"flat {th} threads, {U} vector(s) per thread", lambda k=k, g=grid, th=th:
                            k((g,), (th,), (*xs, out, *cs, np.int64(nvec))))
                # the example's model-ranked plans at this size, its inputs bound to the same
                # arrays and coefficients (SSCAL: ax = a x; WAXPBY: w = a x + b y; VADD: w + y + z)
                prog = kfuse.compile(f"examples/{EXAMPLE[K]}.kf", dtype=dtype, tuned=False, sizes={"N": N})
                inputs = {1: {"a": float(cs[0]), "x": xs[0]},
                          2: {"a": float(cs[0]), "x": xs[0], "b": float(cs[1]), "y": xs[1]},
                          3: {"w": xs[0], "y": xs[1], "z": xs[2]}}[K]
                oname = prog.program.outputs[0].name
                seen = 0
                for _, plan in zip(range(args.top * 4), prog.search.plans()):
                    if len(plan.kernels) != 1 or seen >= args.top:
                        continue
                    seen += 1
                    b = prog.with_plan(plan).bind(out={oname: out}, **inputs)
                    run(f"kfuse #{seen}: {describe(plan)}", lambda b=b: b())
                coef = [float(c) for c in cs[:K]]
                torch._dynamo.reset()       # a fresh compile per case (no recompile limit)
                f = torch.compile(lambda *a: sum(c * x for c, x in zip(coef, a)))
                tx = [torch.as_tensor(x, device="cuda") for x in xs[:K]]
                holder = {}
                run("torch.compile (own result)", lambda: holder.__setitem__("r", f(*tx)), result=lambda: holder["r"])
                print(f"{dtype} N = 2^{N.bit_length() - 1} K = {K} ({EXAMPLE[K]}-like traffic); limit {limit:.1f} us", flush=True)
                for label, us in rows:
                    print(f"   {label:60s} {us:8.1f}  {limit / us * 100:5.1f} %", flush=True)
                del xs, out
                cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
