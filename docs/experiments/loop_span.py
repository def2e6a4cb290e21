"""Loop axis and span of nested kernels: predicted against measured (issue 15, seed 2800's float64
n = 2048 miss).  For each script, the fusion of all its calls (one kernel) is planned at each size;
its implementations (the model's ranked list, up to --limit, plus the best-predicted one of every
(variants, loop, span, unroll) group past it) are timed alone (cold L2, median of CUDA events) and
printed grouped by (loop, span): the model's best prediction in the group against the measured
best, so that a loop or span the model misprices shows as a group whose measured / predicted ratio
stands apart from the others.

    python docs/experiments/loop_span.py --sizes 2048 4096 --dtypes float64 float32 [--limit 60]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.reference import device_case
from kfuse.tuning.measure import share_module

SCRIPTS = {
    "ger+gemtv+gemv+madd": """matrix A; vector x, y, u, t, s; matrix M, P;
input A, x, y, u;
M = ger(A, x, u); t = gemtv(0.5, M, x); s = gemv(0.75, M, y); P = madd(M, M);
return t, s, P;""",
    "gemv+gemtv": """matrix A; vector p, r, q, s;
input A, p, r;
q = gemv(A, p); s = gemtv(A, r);
return q, s;""",
    "ger+gemtv": """matrix A; vector x, u, t; matrix M;
input A, x, u;
M = ger(A, x, u); t = gemtv(M, x);
return M, t;""",
    "madd": """matrix A, B, C;
input A, B;
C = madd(A, B);
return C;""",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    ap.add_argument("--scripts", nargs="+", default=list(SCRIPTS), choices=list(SCRIPTS))
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", help="write every timed implementation here")
    a = ap.parse_args()
    records = []
    timer = device_timer(reps=a.reps, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s (read + write)", flush=True)
    for dtype in a.dtypes:
        for name in a.scripts:
            for n in a.sizes:
                records += run(name, dtype, n, a.limit, timer)
                if a.json:
                    Path(a.json).write_text(json.dumps(records, indent=0))


def run(name, dtype, n, limit, timer):
    text = SCRIPTS[name]
    probe = kfuse.compile(text, tuned=False)
    base = kfuse.compile(text, dtype=dtype, tuned=False, sizes={d.name: n for d in probe.program.dims})
    s, p = base.search, base.program
    dims = s.dims
    block = frozenset(range(len(p.calls)))
    ranked = s.ranked[block]
    chosen, seen = [], set()
    for k, (pred, impl, code) in enumerate(ranked):
        group = (impl.variants, impl.loop, impl.span, impl.unroll)
        if k < limit or group not in seen:
            chosen.append(k)
        seen.add(group)
    cases = []
    for k in chosen:
        plan = s.plan((block,), (k,))
        plan = replace(plan, kernels=tuple(replace(kk, name=f"{kk.name}_s{k}") for kk in plan.kernels))
        cases.append((k, base.with_plan(plan)))
    share_module([c for _, c in cases], "loop_span", dims)
    dev, _, outs = device_case(p, dims, dtype, 0)
    rows = []
    for k, prog in cases:
        pred, impl, _ = ranked[k]
        t = timer(prog.bind(out=outs, **dev))[1]
        rows.append((k, pred * 1e6, t, impl))
        prog.release()
    by_group = defaultdict(list)
    for r in rows:
        by_group[(r[3].loop, r[3].span)].append(r)
    first_t = rows[0][2]
    best = min(rows, key=lambda r: r[2])
    print(f"\n{name} {dtype} n={n}: {len(ranked)} implementations, {len(rows)} timed; model's first "
          f"#{rows[0][0]} {first_t:.1f} us (predicted {rows[0][1]:.1f}), measured best #{best[0]} {best[2]:.1f} us "
          f"({first_t / best[2]:.3f}x): {best[3].describe(p)}")
    print("   loop span | best predicted: rank, us -> measured | measured best: rank, us (predicted) | timed")
    for (loop, span), rs in sorted(by_group.items()):
        bp = min(rs, key=lambda r: r[1])
        bm = min(rs, key=lambda r: r[2])
        print(f"   {loop:4s} {span:4d} | #{bp[0]:<4d} {bp[1]:7.1f} -> {bp[2]:7.1f} | #{bm[0]:<4d} {bm[2]:7.1f} ({bm[1]:7.1f}) "
              f"| {len(rs)}   {bm[3].describe(p)}", flush=True)
    return [dict(script=name, dtype=dtype, n=n, rank=k, predicted_us=pred, measured_us=t, loop=impl.loop,
                 span=impl.span, unroll=impl.unroll, by=impl.by, ipb=impl.ipb, describe=impl.describe(p))
            for k, pred, t, impl in rows]


if __name__ == "__main__":
    main()
