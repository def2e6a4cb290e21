"""Where a device-loop step's time goes at small n: the merged kernel (runtime/merged.py)
instrumented with %globaltimer and clock64 at its start, after waiting for the kernel before it
(the gemv, PDL), after each phase and at its end. Per step (median over steps 20-100 of a 120-step
fori loop): wait = start -> gemv done, phase k, tail, and gap = previous step's end -> this step's
start of waiting... all in ns (globaltimer) and cycles (clock64)."""
import sys, statistics
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import solvers
from kfuse.runtime import merged, compiler

mods = []
orig_load = compiler.load_module
def load(source, relocatable=False):
    m = orig_load(source, relocatable)
    if "kf_dbg" in source:
        mods.append(m)
    return m
compiler.load_module = load

orig_text = merged.kernel_text
names = []
def text(shape, dtype, name):
    names.append(name)
    t = orig_text(shape, dtype, name)
    head = ("__device__ unsigned long long kf_dbg[4096][32];\n__device__ unsigned int kf_dbg_n;\n"
            "#ifndef KF_GT\n#define KF_GT\n__device__ __forceinline__ unsigned long long kf_gt() { unsigned long long v; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(v)); return v; }\n#endif\n")
    lines = t.split("\n")
    out, k = [], 0
    for ln in lines:
        out.append(ln)
        if ln.startswith("    (void)t; (void)all;"):
            out += ["    __shared__ unsigned kf_slot;",
                    "    if (t == 0) { kf_slot = atomicAdd(&kf_dbg_n, 1u) % 4096u; kf_dbg[kf_slot][0] = kf_gt(); kf_dbg[kf_slot][16] = clock64(); kf_dbg[kf_slot][15] = ID; }",
                    "    kf_wait_prior();",
                    "    __syncthreads();",
                    "    if (t == 0) { kf_dbg[kf_slot][1] = kf_gt(); kf_dbg[kf_slot][17] = clock64(); }"]
            k = 2
        elif "what this phase wrote is seen by the next" in ln:
            out.append(f"    if (t == 0) {{ kf_dbg[kf_slot][{k}] = kf_gt(); kf_dbg[kf_slot][{k + 16}] = clock64(); }}")
            k += 1
    # the end: before the final brace
    assert out[-2] == "}" or out[-1] == "", out[-3:]
    end = len(out) - 1 - out[::-1].index("}")
    out.insert(end, f"    __syncthreads();\n    if (t == 0) {{ kf_dbg[kf_slot][14] = kf_gt(); kf_dbg[kf_slot][30] = clock64(); }}")
    return head.replace("kf_dbg", f"kf_dbg_{name}") + "\n".join(out).replace("kf_dbg", f"kf_dbg_{name}").replace("= ID;", f"= {name[9:]};")
merged.kernel_text = text

def xp(v, dtype):
    return cp.asarray(v, dtype=dtype)

for dtype in ["float32", "float64"]:
    for m in ["cg", "power", "bicgstab"]:
        n = 1024
        mods.clear(); names.clear()
        state = L.problem(m, n, dtype, xp)
        run = L.kfuse_fori(m)
        run(state, 10)
        print(dtype, m, "merged kernels:", names, "modules:", len(mods), flush=True)
        cp.cuda.Device().synchronize()
        if not mods:
            print(dtype, m, "no instrumented module loaded (names: %s)" % names); 
        found = [(mods[-1], nm) for nm in names] if mods else []
        run(state, 120)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(); run(state, 120); e1.record(); e1.synchronize()
        us = cp.cuda.get_elapsed_time(e0, e1) * 1e3 / 120
        print(f"{dtype} {m} n={n}: {us:.2f} us/step", flush=True)
        for mod, name in found:
            d = cp.ndarray((4096, 32), cp.uint64, mod.get_global(f"kf_dbg_{name}")).get().astype(np.int64)
            cnt = int(cp.ndarray((1,), cp.uint32, mod.get_global(f"kf_dbg_{name}_n")).get()[0])
            d = d[:min(cnt, 4096)]
            nph = [k for k in range(2, 14) if (d[:, k] > 0).all()]
            rows = d[cnt - 100:cnt - 10] if cnt >= 110 else d
            def med(x): return int(statistics.median(x.tolist()))
            print(f"  {name}: {cnt} launches; ns: wait(start->prior done) {med(rows[:, 1] - rows[:, 0])}",
                  " phases", [med(rows[:, k] - rows[:, k - 1]) for k in nph],
                  f" tail {med(rows[:, 14] - rows[:, nph[-1]])}",
                  f" total {med(rows[:, 14] - rows[:, 0])}",
                  f" period {med(rows[1:, 0] - rows[:-1, 0])}",
                  f" end->next start {med(rows[1:, 0] - rows[:-1, 14])}",
                  f" end->next prior-done {med(rows[1:, 1] - rows[:-1, 14])}")
            print(f"  {name} cycles: wait {med(rows[:, 17] - rows[:, 16])}",
                  " phases", [med(rows[:, k + 16] - rows[:, k + 15]) for k in nph],
                  f" tail {med(rows[:, 30] - rows[:, nph[-1] + 16])}", flush=True)
