"""Can a program called again and again on the same matrix keep part of it in L2 from one call
to the next by eviction priorities?  With KF_L2_KEEP = K the 16-byte loads of the 4 KB pages whose
index mod 16 is below K take L2 priority `evict_last`, the others `evict_first` (so the streamed
rest does not push the kept pages out); runtime/order.py picks K (about a third of the L2) where
a program's arrays take 1 to 12 x the L2, KFUSE_L2_KEEP forces it (0: off).

Each case (the examples with a matrix, a lone q = A p, CG's step from examples/solvers/cg.py) at
each size and dtype, with K off and as chosen (and forced values with --sweep), in rounds that
alternate the variants:
- loop: K back-to-back calls on the same arrays, CUDA events around all of them, per call (a
  solver's loop: what the keep is for);
- cold: single calls after a read of 4 x L2 (the benchmarks' timing: the keep must not flatter it).
Every variant's result is checked against float64 first.

    git apply docs/experiments/l2-keep.patch      # the mechanism (not merged: see README.md)
    PYTHONPATH=src python3 docs/experiments/l2_keep.py [--sizes 4096 8192] [--sweep 2 4 6]

The first version of this experiment (H200, prelude macros since folded into the one mode kept)
also tried evict_last for the kept pages with ordinary priority for the rest (no gain: the rest
pushes the kept pages out) and ordinary priority for the kept pages with evict_first for the rest
(half the gain): `l2-keep-H200.txt`.
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

import kfuse
from kfuse.reference import device_case, evaluate, relative_error
from kfuse.runtime.gpu import cupy
from kfuse.runtime.order import keep_sixteenths
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "solvers"))
from cg import cg_step  # noqa: E402

EXAMPLES = ["atax", "bicgk", "gemver", "gesummv", "sgemv", "sgemvt", "madd"]


def loop_us(call, K):
    cp = cupy()
    call()
    cp.cuda.get_current_stream().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    s.record()
    for _ in range(K):
        call()
    e.record()
    e.synchronize()
    return cp.cuda.get_elapsed_time(s, e) * 1e3 / K


def bound(prog, inputs, keep, out=None):
    """A bound call of a fresh copy of prog built with KFUSE_L2_KEEP=keep ("" = kfuse's choice)."""
    q = prog.with_plan(prog.plan)
    old = os.environ.pop("KFUSE_L2_KEEP", None)
    if keep:
        os.environ["KFUSE_L2_KEEP"] = keep
    try:
        b = q.bind(out=out, **inputs) if out is not None else q.bind(**inputs)
        b(sync=True)
    finally:
        os.environ.pop("KFUSE_L2_KEEP", None)
        if old is not None:
            os.environ["KFUSE_L2_KEEP"] = old
    return b


def cases(dt, n):
    """(label, program at the sizes, inputs, check(outputs) -> error)."""
    cp = cupy()
    out = []
    for name in EXAMPLES + ["gemv"]:
        if name == "gemv":
            prog = kfuse.compile("matrix A; vector p, q; input A, p; q = gemv(A, p); return q;", dtype=dt,
                                 tuned=False, name="gemv")
        else:
            prog = kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dt, tuned=False, name=name)
        p = prog.program
        dims = {d.id: n for d in p.dims}
        dev, host, poisoned = device_case(p, dims, dt, n)
        ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)

        def check(got, p=p, ref=ref, mag=mag):
            got = got if isinstance(got, tuple) else (got,)
            return max(relative_error(cp.asnumpy(g), ref[v.id], mag[v.id]) for v, g in zip(p.outputs, got))
        out.append((name, prog.for_sizes(dims), dims, dev, check))
    rs = np.random.default_rng(n)
    A = cp.asarray(rs.standard_normal((n, n)) / np.sqrt(n), dtype=dt)
    x, r, pv = (cp.asarray(rs.standard_normal(n), dtype=dt) for _ in range(3))
    rr = cp.asarray(float(r @ r), dtype=dt)
    low = cg_step.trace(A, x, r, pv, rr)
    step = kfuse.compile(low.script, dtype=dt, tuned=False, sizes=low.sizes, device_scalars=low.device_scalars,
                         name="cg_step")
    q64 = A.astype(cp.float64) @ pv.astype(cp.float64)
    alpha = float(rr) / float(pv.astype(cp.float64) @ q64)
    r64 = r.astype(cp.float64) - alpha * q64

    def check_step(got):
        return float(cp.linalg.norm(got[1] - r64) / cp.linalg.norm(r64))
    out.append(("CG step", step, {d.id: n for d in step.program.dims}, {"A": A, "x": x, "r": r, "p": pv, "rr": rr},
                check_step))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--sweep", type=int, nargs="*", default=[])
    ap.add_argument("--only", nargs="*", default=None, help="case labels to run (default: all)")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cp = cupy()
    dev = cp.cuda.runtime.getDeviceProperties(0)
    l2 = int(cp.cuda.Device().attributes["L2CacheSize"])
    print(f"{dev['name'].decode()}, L2 {l2 / 2**20:.0f} MB; per call, median of {args.rounds} rounds: loop of "
          f"{args.calls} calls / cold single calls (median of 30)", flush=True)
    for dt in args.dtypes:
        for n in args.sizes:
            for label, prog, dims, inputs, check in cases(dt, n):
                if args.only and label not in args.only:
                    continue
                auto = keep_sixteenths(prog, dims, l2)
                variants = ["0", ""] + [str(k) for k in args.sweep if k != auto]
                calls = {}
                for v in variants:
                    b = bound(prog, inputs, v)
                    err = check(b())
                    cp.cuda.runtime.deviceSynchronize()
                    assert err < (1e-4 if dt == "float32" else 1e-11), (label, v, err)
                    calls[v] = b
                loop = {v: [] for v in variants}
                cold = {v: [] for v in variants}
                for _ in range(args.rounds):
                    for v in variants:
                        loop[v].append(loop_us(calls[v], args.calls))
                        cold[v].append(median_us(calls[v], reps=30, cold_l2=True))
                med = {v: (statistics.median(loop[v]), statistics.median(cold[v])) for v in variants}
                base = med["0"]
                cells = [f"off {base[0]:7.1f} / {base[1]:7.1f}"]
                for v in variants[1:]:
                    k = auto if v == "" else int(v)
                    cells.append(f"{'auto ' if v == '' else ''}K={k} {med[v][0]:7.1f} / {med[v][1]:7.1f} "
                                 f"({med[v][0] / base[0]:.3f}x / {med[v][1] / base[1]:.3f}x)")
                print(f"{dt} n={n:5d} {label:8s} " + "   ".join(cells), flush=True)
                del calls
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
