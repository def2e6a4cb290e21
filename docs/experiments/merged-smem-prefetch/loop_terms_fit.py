import sys, numpy as np
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "examples/solvers")
import kfuse, loops as B
from kfuse.cost.calibrated import target_blocks
meas = {}
for f in ["/work/.device/1/strips-ab.txt"]:
    for l in open(f):
        if "strips=off" in l and "fori" in l:
            p = l.split()
            meas[(p[0], int(p[1][2:]), p[2])] = float(l.split("strips=off:")[1].split()[0])
NODE = float(sys.argv[1]) if len(sys.argv) > 1 else 0.9
PHASE = float(sys.argv[2]) if len(sys.argv) > 2 else 0.9
for (dt, n, m), us in sorted(meas.items()):
    st = B.problem(m, n, dt, lambda v, d: np.asarray(v, dtype=d))
    f = kfuse.jit(B.METHODS[m][0])
    c0 = f.compile(*st)
    c = c0.for_sizes({d.id: n for d in c0.program.dims})
    model = c.search.model
    dims = {d.id: n for d in c.program.dims}
    ks, t = [], 0.0
    for code in c.kernels:
        p = model.kernel_parts(code, dims, np.dtype(dt).itemsize)
        L = code.launch
        dev = model.device
        iters = L.iterations(dims, target_blocks(dev["sms"], dev["max_threads_per_sm"], L.threads))
        grid = L.grid(dims, iters)
        body = max(p["transfer"] + p["barrier"], p["compute"]) + p["contention"]
        ks.append((grid, body * 1e6))
    # nodes: consecutive one-block kernels merge into one node (each a phase)
    nodes, phases, k = 0, 0, 0
    while k < len(ks):
        if ks[k][0] == 1:
            e = k
            while e < len(ks) and ks[e][0] == 1: e += 1
            nodes += 1; phases += e - k; k = e
        else:
            nodes += 1; k += 1
    body = sum(b for _, b in ks)
    pred = body + NODE * nodes + PHASE * phases
    print(f"{dt} {n} {m:8s} meas {us:6.2f} pred {pred:6.2f} ratio {pred/us:4.2f}  body {body:6.2f} nodes {nodes} phases {phases} grids {[g for g,_ in ks]} bodies {[round(b,2) for _,b in ks]}")
