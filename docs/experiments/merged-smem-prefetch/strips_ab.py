"""Run 1 (issue 41): graph-node costs on this GPU, and vector_on_strips off/on in merged device
loops (fori; while at 1024), alternating, medians; error against float64 NumPy."""
import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, kfuse
import loops as L
import solvers

def events():
    return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

# graph nodes
mod = cp.RawModule(code='extern "C" __global__ void e(int n, float* s){ if (n < 0) s[0] = 1.f; }\n'
                        'extern "C" __global__ void l(int n, float* s){ float v = s[threadIdx.x]; if (v == 12345.f) s[0] = 0.f; }\n'
                        'extern "C" __global__ void a(int n, float* s){ float v = s[threadIdx.x]; atomicAdd(s + 1024 + (threadIdx.x & 7), v); }')
e, l, a = mod.get_function("e"), mod.get_function("l"), mod.get_function("a")
sink = cp.ones(4096, dtype=cp.float32); buf = cp.zeros(8192, dtype=cp.float64)
st = cp.cuda.Stream(non_blocking=True)
for name, fn in [("empty", lambda: e((1,), (32,), (np.int32(0), sink))),
                 ("empty132", lambda: e((132,), (256,), (np.int32(0), sink))),
                 ("load1", lambda: l((1,), (256,), (np.int32(0), sink))),
                 ("load64", lambda: l((64,), (256,), (np.int32(0), sink))),
                 ("atomic64", lambda: a((64,), (256,), (np.int32(0), sink))),
                 ("memset", lambda: buf.data.memset_async(0, buf.nbytes))]:
    with st:
        st.begin_capture()
        for _ in range(50): fn()
        g = st.end_capture()
        g.launch(st); st.synchronize()
        ts = []
        for _ in range(7):
            a0, b0 = cp.cuda.Event(), cp.cuda.Event()
            a0.record(st); [g.launch(st) for _ in range(20)]; b0.record(st); b0.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a0, b0) * 1e3 / 1000)
    print(f"graph of 50 {name}: {statistics.median(ts):.3f} us per node", flush=True)

sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1024, 2048, 4096]
methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["cg", "bicg", "bicgstab", "power", "lsq"]
print("bandwidth GB/s", L.copy_bandwidth(cp) / 1e9, flush=True)
for dtype in ["float32", "float64"]:
    for n in sizes:
        for m in methods:
            ref = L.reference(m, L.problem(m, n, dtype, lambda v, d: np.asarray(v, np.float64)), 30)
            step = L.METHODS[m][0]
            kinds = ["fori", "while"] if (m in L.SOLVERS and n == 1024) else ["fori"]
            for kind in kinds:
                res = {}
                for rep in range(3):
                    for strips in (False, True):
                        body = kfuse.jit(lambda s, step=step: step(*s), vector_on_strips=strips)
                        if kind == "fori":
                            bi = kfuse.jit(lambda i, s, step=step: step(*s), vector_on_strips=strips)
                            run = lambda st, k, bi=bi: kfuse.fori_loop(0, k, bi, st)
                        else:
                            kk = L.SOLVERS[m]
                            def run(st, k, body=body, kk=kk):
                                s = kfuse.while_loop(lambda s: ~(abs(s[kk]) < 0.0), body, st, max_iterations=k)
                                assert s.iterations == k
                                return s
                        state = L.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
                        try:
                            us, out = L.timed(run, state, 120, 5, events, 30)
                        except Exception as ex:
                            print(f"{dtype} {n} {m} {kind} strips={strips} FAILED {type(ex).__name__}: {str(ex)[:300]}", flush=True)
                            continue
                        got = cp.asnumpy(out[1 if m != "lsq" else 2]).astype(np.float64)
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        res.setdefault(strips, []).append((us, err))
                line = f"{dtype} n={n} {m:8s} {kind:5s}"
                for s, v in res.items():
                    line += f" | strips={'on ' if s else 'off'}: {statistics.median(x[0] for x in v):6.2f} e{max(x[1] for x in v):.0e}"
                print(line, flush=True)
