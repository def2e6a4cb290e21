"""One-pass ATAX over thread-block clusters (issue 18): every cluster implementation the planner
ranks at sizes whose rows no single block holds, timed beside the model's first choice, the
best two-kernel plan, a pure read of A (cupy.sum) and the one-pass limit (one read of A over the
copy bandwidth measured in the same run); each result checked against float64 first.

    PYTHONPATH=src python3 docs/experiments/cluster_forms.py [--cases float64:16384 float32:32768 ...]
"""
import argparse
import sys
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

ROOT = Path(__file__).resolve().parents[2]
ATAX = ROOT / "examples" / "atax.kf"
sys.path.insert(0, str(ROOT / "benchmarks"))
from atax_onepass_bench import atax_inputs  # noqa: E402  (the benchmark's inputs and reference)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["float64:16384", "float32:32768", "float64:12289",
                                                  "float32:20000", "float64:24576", "float32:65536"])
    ap.add_argument("--top", type=int, default=24)
    args = ap.parse_args()
    cp = cupy()
    timer = device_timer(reps=20, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for case in args.cases:
        dt, n = case.split(":")
        n = int(n)
        A, x, ref = atax_inputs(cp, n, dt)
        limit = A.nbytes / bw / 1e3
        t_read = timer(lambda: cp.sum(A))[1]
        prog = kfuse.compile(ATAX, dtype=dt, tuned=False, sizes={"n": n})
        print(f"{dt} n={n}: one-pass limit {limit:.1f} us, cupy.sum(A) {t_read:.1f} us ({t_read / limit:.2f}x)",
              flush=True)
        plans = [p for _, p in zip(range(args.top), prog.search.plans())]
        two = next(p for p in prog.search.plans() if len(p.kernels) == 2)
        if two not in plans:
            plans.append(two)
        for rank, plan in enumerate(plans):
            p = prog.with_plan(plan)
            out = {"y": cp.full(n, cp.nan, dtype=dt)}
            bound = p.bind(A=A, x=x, out=out)
            bound()
            err = float(cp.linalg.norm(out["y"] - ref) / cp.linalg.norm(ref))
            t = timer(bound)[1]
            L = p.kernels[0].launch
            held = ""
            if L.cluster > 1:
                from kfuse.runtime import driver
                held = f", {driver.max_active_clusters(p.functions(0)[0], L.threads, L.cluster)} clusters held"
            pred = (plan.predicted or float("nan")) * 1e6
            print(f"  {rank:2d} {t:8.1f} us ({t / limit:.3f}x) error {err:.1e} predicted {pred:.1f}: "
                  f"{plan.summary()}{held}", flush=True)
        del A


if __name__ == "__main__":
    main()
