import sys, os, statistics
sys.path.insert(0, "examples/solvers"); sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as B

def timeit(run, state, steps, reps=3):
    run(state, steps); cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); run(state, steps); b.record(); b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / steps)
    return statistics.median(ts)

# queued launch terms: a graph of K empty kernels / K memsets
mod = cp.RawModule(code='extern "C" __global__ void e(int n, float* s){ if (n < 0) s[0] = 1.f; }\n'
                        'extern "C" __global__ void l(int n, float* s){ float v = s[threadIdx.x]; if (v == 12345.f) s[0] = 0.f; }')
e, l = mod.get_function("e"), mod.get_function("l")
sink = cp.ones(1024, dtype=cp.float32); buf = cp.zeros(8192, dtype=cp.float64)
st = cp.cuda.Stream(non_blocking=True)
for name, fn in [("empty", lambda: e((1,), (32,), (np.int32(0), sink))),
                 ("empty132", lambda: e((132,), (256,), (np.int32(0), sink))),
                 ("load1", lambda: l((1,), (256,), (np.int32(0), sink))),
                 ("memset", lambda: buf.data.memset_async(0, buf.nbytes))]:
    with st:
        st.begin_capture()
        for _ in range(50): fn()
        g = st.end_capture()
        g.launch(st); st.synchronize()
        ts = []
        for _ in range(5):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(st); [g.launch(st) for _ in range(20)]; b.record(st); b.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / 1000)
    print(f"graph of 50 {name}: {statistics.median(ts):.2f} us per node", flush=True)

sizes = [int(s) for s in sys.argv[1].split(",")]
for n in sizes:
  for dtype in ["float32", "float64"]:
    for m in ["cg", "bicg", "bicgstab", "power", "lsq"]:
        state = B.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
        step = B.METHODS[m][0]
        out = []
        fori = lambda st, k: kfuse.fori_loop(0, k, lambda i, s: step(*s), st)
        out.append(f"fori {timeit(fori, state, 1200):.2f}")
        body = kfuse.jit(lambda i, s: step(*s), vector_on_strips=True)
        fori2 = lambda st, k: kfuse.fori_loop(0, k, body, st)
        out.append(f"strips {timeit(fori2, state, 1200):.2f}")
        jd = kfuse.jit(step); js = kfuse.jit(step, vector_on_strips=True)
        def plain(st, k, j=jd):
            for _ in range(k): st = j(*st)
            return st
        out.append(f"plain {timeit(plain, state, 600):.2f}")
        out.append(f"plain-strips {timeit(lambda st, k: plain(st, k, js), state, 600):.2f}")
        print(f"{m} n={n} {dtype}: " + "  ".join(out), flush=True)
