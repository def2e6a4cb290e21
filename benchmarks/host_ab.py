"""Host time of kfuse's call paths, two source trees side by side (GPU): a device loop's call
(``fori_loop`` of 4 CG steps) and a jitted CG step fed back 4 times from Python, with CuPy arrays
and with torch tensors, at n = 1024 (where the host's time is most of a step's).  Each tree runs in
its own processes, alternating (``--rounds`` each); a process warms up, then takes the median wall
time of ``--calls`` calls, each waited for.

    PYTHONPATH=src python benchmarks/host_ab.py OLD_TREE/src           # against this tree's src
    PYTHONPATH=src python benchmarks/host_ab.py OLD/src NEW/src --dtypes float64 --out ab.md

Get an old tree with ``git worktree add --detach /tmp/old COMMIT`` (or ``git archive COMMIT src``
into a folder that travels with the working tree).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r'''
import sys, time, json, statistics
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[5])
import numpy as np, cupy as cp, kfuse
from cg import cg_update
n, dt, calls, fw = int(sys.argv[3]), np.dtype(sys.argv[2]), int(sys.argv[4]), sys.argv[6]
rng = np.random.default_rng(5)
M = rng.standard_normal((n, n))
host = [(M @ M.T / n + np.eye(n)).astype(dt), rng.standard_normal(n).astype(dt)]
if fw == "torch":
    import torch
    A, b = (torch.as_tensor(a, device="cuda") for a in host)
    sync = torch.cuda.synchronize
    x0 = torch.zeros_like(b)
else:
    A, b = (cp.asarray(a) for a in host)
    sync = cp.cuda.runtime.deviceSynchronize
    x0 = cp.zeros_like(b)
r0, p0, rr0 = b.clone() if fw == "torch" else b.copy(), b, b @ b
step = kfuse.jit(cg_update)
def body(i, s):
    A, x, r, p, rr = s
    return (A,) + cg_update(A, x, r, p, rr)
def fori():
    kfuse.fori_loop(0, 4, body, (A, x0, r0, p0, rr0)); sync()
def plain():
    x, r, p, rr = x0, r0, p0, rr0
    for _ in range(4):
        x, r, p, rr = step(A, x, r, p, rr)
    sync()
res = {}
for name, f in (("fori_loop, 4 steps", fori), ("jitted step x4", plain)):
    for _ in range(20):
        f()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    res[name] = statistics.median(ts) * 1e6
print(json.dumps(res))
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the first tree's src folder")
    ap.add_argument("new", nargs="?", default=str(ROOT / "src"), help="the second tree's src folder (default: this one)")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--frameworks", nargs="+", default=["cupy", "torch"])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    lines = ["| dtype | framework | call | tree | median µs a call | per process |", "| --- | --- | --- | --- | ---: | --- |"]
    for dt in args.dtypes:
        for fw in args.frameworks:
            res: dict = {}
            for _ in range(args.rounds):
                for tree, src in (("old", args.old), ("new", args.new)):
                    out = subprocess.run([sys.executable, "-c", CHILD, src, dt, str(args.n), str(args.calls),
                                          str(ROOT / "examples" / "solvers"), fw], capture_output=True, text=True)
                    if out.returncode:
                        print(out.stderr[-3000:], file=sys.stderr)
                        return 1
                    for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items():
                        res.setdefault((k, tree), []).append(v)
            for (k, tree), v in sorted(res.items()):
                lines.append(f"| {dt} | {fw} | {k} | {tree} | {statistics.median(v):.1f} | {', '.join(f'{t:.1f}' for t in v)} |")
    text = f"old: {args.old}\nnew: {args.new}\nn = {args.n}\n\n" + "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
