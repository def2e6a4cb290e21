"""Is a one-block kernel in a loop step paying for its code size (cold instruction cache on
whichever SM it lands on)?  Graph of STEPS x [wide kernel over 4 MB, one-block kernel of N
straight-line FMAs] against the same dynamic count in a rolled loop."""
import sys, numpy as np, cupy as cp

def src(n, rolled):
    lines = []
    if rolled:
        body = "\n".join(f"        a{k%8} = fmaf(a{k%8}, c, {k%8+1}.0f);" for k in range(8))
        loop = f"    #pragma unroll 1\n    for (int it = 0; it < {n//8}; ++it) {{\n{body}\n        c = c * 0.999f;\n    }}"
    else:
        loop = "\n".join(f"    a{k%8} = fmaf(a{k%8}, c{'+' if k%2 else '-'}{(k%97)*1e-6:.7f}f, {(k%13)+1}.0f);" for k in range(n))
    decl = "".join(f"    float a{k} = x[threadIdx.x + {k}];\n" for k in range(8))
    return f'''
extern "C" __global__ void wide(const float* __restrict__ A, float* out, int n) {{
    float s = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += A[i];
    if (s == 12345.f) out[0] = s;
}}
extern "C" __global__ void one(const float* x, float* out, float c) {{
{decl}{loop}
    out[threadIdx.x] = a0+a1+a2+a3+a4+a5+a6+a7;
}}
'''

def run(n, rolled, steps=100, reps=7, wide_on=True):
    m = cp.RawModule(code=src(n, rolled), options=("-std=c++17",))
    wide, one = m.get_function("wide"), m.get_function("one")
    A = cp.random.rand(1 << 20, dtype=cp.float32)
    x = cp.random.rand(512, dtype=cp.float32); out = cp.zeros(512, cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        for _ in range(steps):
            if wide_on:
                wide((264,), (256,), (A, out, np.int32(A.size)))
            one((1,), (256,), (x, out, np.float32(0.5)))
        g = s.end_capture()
        g.launch(s); s.synchronize()
        ts = []
        for _ in range(reps):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s); g.launch(s); e1.record(s); e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / steps)
    return float(np.median(ts))

print("N  straight(us/step) rolled  | without wide: straight rolled")
for n in (8, 256, 1024, 2048, 4096, 8192):
    print(n, f"{run(n, False):.2f} {run(n, True):.2f} | {run(n, False, wide_on=False):.2f} {run(n, True, wide_on=False):.2f}", flush=True)
