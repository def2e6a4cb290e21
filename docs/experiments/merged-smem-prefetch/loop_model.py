import sys, numpy as np
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "examples/solvers")
import kfuse, loops as B
from kfuse.cost.calibrated import target_blocks
meas = {}
for l in open("/work/.device/1/strips-ab.txt"):
    if "fori" in l and "strips=off" in l:
        p = l.split()
        meas[(p[0], int(p[1][2:]), p[2])] = (float(l.split("strips=off:")[1].split()[0]), float(l.split("strips=on :")[1].split()[0]))
NODE, PHASE = 1.393, 1.155
def pred(c, n, dt):
    model = c.search.model
    dims = {d.id: n for d in c.program.dims}
    ks = []
    for code in c.kernels:
        from kfuse.fusion.rank import entries_of
        t = model.kernel_time(code, dims, entries_of(c.program, dims), np.dtype(dt).itemsize)
        miss = model._missing(code) is not None
        from kfuse.cost import transfer
        L = code.launch; dev = model.device
        lt = (transfer.DEFAULT_MACHINE.launch if miss else model.launch_seconds) + bool(L.clears) * (transfer.DEFAULT_MACHINE.clear if miss else model.cal.clear_ns * 1e-9)
        iters = L.iterations(dims, target_blocks(dev["sms"], dev["max_threads_per_sm"], L.threads))
        ks.append((L.grid(dims, iters), (t - lt) * 1e6))
    nodes = phases = k = 0
    while k < len(ks):
        if ks[k][0] == 1:
            e = k
            while e < len(ks) and ks[e][0] == 1: e += 1
            nodes += 1; phases += e - k; k = e
        else:
            nodes += 1; k += 1
    return sum(b for _, b in ks) + NODE * nodes + PHASE * phases, len(ks)
agree = 0
for (dt, n, m), (off, on) in sorted(meas.items()):
    st = B.problem(m, n, dt, lambda v, d: np.asarray(v, dtype=d))
    r = []
    for s in (False, True):
        c0 = kfuse.jit(B.METHODS[m][0], vector_on_strips=s).compile(*st)
        r.append(pred(c0.for_sizes({d.id: n for d in c0.program.dims}), n, dt))
    pick = r[1][0] < r[0][0]
    best = on < off
    agree += pick == best or abs(on - off) / off < 0.03
    print(f"{dt} {n} {m:8s} meas off {off:6.2f} on {on:6.2f} | pred off {r[0][0]:6.2f} ({r[0][1]}k) on {r[1][0]:6.2f} ({r[1][1]}k) | pick {'on ' if pick else 'off'} {'OK' if pick == best or abs(on-off)/off < 0.03 else 'WRONG'} loss {((on if pick else off) / min(on, off) - 1) * 100:4.1f}%")
print("agree", agree)
