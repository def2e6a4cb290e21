"""Refit cost/queued.py's two loop-step terms (per graph node, per merged phase) on the device-loop
steps measured with the current runtime (H100: n = 1024 and 2048 from the A/B of the early first
kernel, its 'on' column; n = 4096 from the loop tables), 5 methods, both dtypes, fori loops."""
import sys, numpy as np
sys.path.insert(0, "benchmarks")
import kfuse, loops as B
from kfuse.cost.queued import QueuedTerms, step_price, H100
meas = {}
for l in open(sys.argv[1]):          # head-ab-H100.txt
    if "fori" in l and "|" in l:
        p = l.split()
        meas[(p[0], int(p[1][2:]), p[2])] = float(l.split("| head")[1].split()[0])
for f, dt in ((sys.argv[2], "float32"), (sys.argv[3], "float64")):      # the loop tables
    for l in open(f):
        c = [x.strip() for x in l.strip().strip("|").split("|")]
        if len(c) == 14 and c[1] == dt and c[2] == "4096":
            meas[(dt, 4096, c[0])] = float(c[3])
rows = []
for (dt, n, m), us in sorted(meas.items()):
    st = B.problem(m, n, dt, lambda v, d: np.asarray(v, dtype=d))
    c0 = kfuse.jit(B.METHODS[m][0]).compile(*st)
    c = c0.for_sizes({d.id: n for d in c0.program.dims})
    dims = {d.id: n for d in c.program.dims}
    p = step_price(c.search.model, c.kernels, dims, dims, np.dtype(dt).itemsize, QueuedTerms(0.0, 0.0))
    rows.append((dt, n, m, us, p.bodies * 1e6, p.nodes, p.phases))
A = np.array([[r[5], r[6]] for r in rows], float)
y = np.array([r[3] - r[4] for r in rows])
(node, phase), *_ = np.linalg.lstsq(A, y, rcond=None)
print(f"least squares: node {node:.3f} us, phase {phase:.3f} us")
node, phase = max(node, 0.0), max(phase, 0.0)
for name, (a, b) in (("first fit", (1.39, 1.16)), ("refit", (node, phase))):
    ratios = [(r[4] + a * r[5] + b * r[6]) / r[3] for r in rows]
    inside = sum(0.8 <= x <= 1.25 for x in ratios)
    print(f"{name}: node {a:.2f} us, phase {b:.2f} us: price / measured {min(ratios):.2f}-{max(ratios):.2f}, "
          f"median {np.median(ratios):.2f}, {inside} of {len(rows)} within 0.8-1.25")
    for r, x in zip(rows, ratios):
        print(f"   {r[0]} n={r[1]} {r[2]:8s} measured {r[3]:6.2f} bodies {r[4]:6.2f} nodes {r[5]} phases {r[6]} -> {x:.2f}")
