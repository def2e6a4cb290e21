"""Does a program called again and again on the same matrix (an iterative solver's step) gain
from walking its blocks in the mirrored order on every other call?  The call before left the
part of A it read last in L2; a call walking the other way starts on it.

For a CG step (examples/solvers/cg.py's cg_step, first choice) and a lone q = A p, at each size
and dtype: K back-to-back calls on the same arrays, timed with CUDA events around all K (L2 warm
from call to call, as in a solver's loop), per call:
- same:   every call with the orders kfuse chooses (runtime/order.py), KFUSE_ALTERNATE=0;
- mirror: every call with bit 0 of every kernel's order flipped (alone: is backward any slower?);
- alternate: the two in turns (kfuse's calls since this experiment: kf_flip on every other call);
and torch.compile of the same CG step run the same way.  Results checked against float64 first.

    PYTHONPATH=src python3 docs/experiments/alternate_calls.py [--sizes 4096 8192 16384]
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

from kfuse.runtime.gpu import cupy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "solvers"))
from explore_util import torch_cg_step  # noqa: E402


def loop_us(calls, K, rounds=7):
    """Median over rounds of (time of K back-to-back calls) / K, calls taken in turn."""
    cp = cupy()
    for c in calls:
        c()
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(rounds):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        for k in range(K):
            calls[k % len(calls)]()
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e) * 1e3 / K)
    return statistics.median(times)


def bound(prog, inputs, orders=None, alternate=True):
    """A bound call of a fresh copy of prog: kernels built with ``orders`` (bits 0, 1; default:
    kfuse's choice), calls alternating the mirrored order or not (KFUSE_ALTERNATE)."""
    q = prog.with_plan(prog.plan)
    env = {"KFUSE_ALTERNATE": "1" if alternate else "0"}
    if orders is not None:
        env["KFUSE_ORDER"] = ",".join(str(o & 3) for o in orders)
    os.environ.update(env)
    try:
        b = q.bind(**inputs)
        b(sync=True)
    finally:
        for k in env:
            del os.environ[k]
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()
    cp = cupy()
    import torch
    import kfuse
    from cg import cg_step
    for dt in args.dtypes:
        for n in args.sizes:
            rs = np.random.default_rng(n)
            A = cp.asarray(rs.standard_normal((n, n)) / np.sqrt(n), dtype=dt)
            x, r, p = (cp.asarray(rs.standard_normal(n), dtype=dt) for _ in range(3))
            rr = cp.asarray(float(r @ r), dtype=dt)
            gemv = kfuse.compile("matrix A; vector p, q; input A, p; q = gemv(A, p); return q;", dtype=dt,
                                 tuned=False, sizes={"A.rows": n, "A.cols": n})
            low = cg_step.trace(A, x, r, p, rr)
            step = kfuse.compile(low.script, dtype=dt, tuned=False, sizes=low.sizes,
                                 device_scalars=low.device_scalars)
            line = [f"{dt} n={n}:"]
            for label, prog, inputs in (("q = A p", gemv, {"A": A, "p": p}),
                                        ("CG step", step, {"A": A, "x": x, "r": r, "p": p, "rr": rr})):
                same = bound(prog, inputs, alternate=False)
                orders = [o & 3 for o in next(iter(same.binding.compiled.launch_cache["orders"].values()))]
                flip = bound(prog, inputs, [o ^ 1 for o in orders], alternate=False)
                alt = bound(prog, inputs)
                if label == "q = A p":
                    ref = A.astype(cp.float64) @ p.astype(cp.float64)
                    for b in (same, flip, alt, alt):
                        got = b()
                        cp.cuda.runtime.deviceSynchronize()
                        err = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
                        assert err < (1e-4 if dt == "float32" else 1e-11), err
                t_same = loop_us([same], args.calls)
                t_flip = loop_us([flip], args.calls)
                t_alt = loop_us([alt], args.calls)
                line.append(f"   {label} ({len(prog.plan.kernels)} kernel(s), orders {orders}): same {t_same:.1f} us, "
                            f"mirror {t_flip:.1f}, alternate {t_alt:.1f} ({t_alt / t_same:.3f}x)")
            tA = torch.as_tensor(A, device="cuda")
            targs = [tA] + [torch.as_tensor(v, device="cuda") for v in (x, r, p, rr)]
            cstep = torch.compile(torch_cg_step)
            line.append(f"   CG step torch.compile: {loop_us([lambda: cstep(*targs)], args.calls):.1f} us, "
                        f"torch eager {loop_us([lambda: torch_cg_step(*targs)], args.calls):.1f}; torch.mv "
                        f"{loop_us([lambda: torch.mv(tA, targs[3])], args.calls):.1f}")
            print("\n".join(line), flush=True)
            del A, tA


if __name__ == "__main__":
    main()
