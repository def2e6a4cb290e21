"""Strip kernels as plain implementations (fusion/space.py, whole_choice): for the examples with
gemv / gemtv calls and a lone gemv, in both dtypes and at n = 1024 ... 16384, the first choice
of the planner without strips (the rule before: strips only for one pass), the first choice with
them, and the model's best strip plans (both loops), each measured; every result checked against
float64 first.

    PYTHONPATH=src python3 docs/experiments/strip_standalone.py [--sizes 4096,8192] [--top 6]
"""
import argparse
import itertools
import re
import sys
from pathlib import Path

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.fusion import space
from kfuse.reference import device_case, evaluate, relative_error
from kfuse.runtime.gpu import cupy

ROOT = Path(__file__).resolve().parents[2]
GEMV = "matrix A[n, n];\nvector x[n], t[n];\ninput A, x;\nt = gemv(A, x);\nreturn t;\n"
SCRIPTS = {"gemv": GEMV, **{s: ROOT / "examples" / f"{s}.kf"
                            for s in ("sgemv", "gesummv", "bicgk", "sgemvt", "gemver", "atax")}}


def old_rule(program, graph, calls):
    """The rule before: strips only where a fusion uses a reduction's result (one pass)."""
    one_pass = bool(space.one_pass_exchanges(program, graph, calls))
    return lambda order, variants: all(
        bool(program.calls[i].function.variants[v].whole) == one_pass for i, v in zip(order, variants))


def plan_at(script, dtype: str, n: int):
    try:
        return kfuse.compile(script, dtype=dtype, tuned=False, sizes={"n": n})
    except kfuse.KfuseError:   # a script of a non-square matrix's sizes
        return kfuse.compile(script, dtype=dtype, tuned=False, sizes={"A.rows": n, "A.cols": n})


def label(plan) -> str:
    d = plan.describe()
    loops = re.findall(r"loop along (\w)", d)
    kinds = re.findall(r"\[(\w+/\w+)(?:\[([^\]]*)\])?\]", d)
    return f"{'/'.join(loops)}: " + ", ".join(f"{k}[{m}]" for k, m in kinds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,4096,8192,16384")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--scripts", default=",".join(SCRIPTS))
    args = ap.parse_args()
    cp = cupy()
    timer = device_timer(reps=20, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    new_rule = space.whole_choice
    for name in args.scripts.split(","):
        for dt in args.dtypes.split(","):
            for n in map(int, args.sizes.split(",")):
                space.whole_choice = old_rule
                try:
                    old = plan_at(SCRIPTS[name], dt, n)
                finally:
                    space.whole_choice = new_rule
                new = plan_at(SCRIPTS[name], dt, n)
                program = new.program
                dims = {d: n for v in list(program.inputs) + list(program.outputs) for d in v.dims}
                inputs, host, poisoned = device_case(program, dims, dt, seed=n)
                env, mag = evaluate(program, host), evaluate(program, host, magnitude=True)
                rows = [("old first", old), ("new first", new)]
                strips = list(itertools.islice(
                    (p for p in itertools.islice(new.search.plans(), 20000) if "strip" in p.describe()), args.top))
                rows += [(f"strip {k}", new.with_plan(p)) for k, p in enumerate(strips)]
                print(f"{name} {dt} n={n}", flush=True)
                for tag, prog in rows:
                    plan = prog.plan
                    outs = {k: a.copy() for k, a in poisoned.items()}
                    try:
                        bound = prog.bind(out=outs, **inputs)
                        bound()
                        cp.cuda.Device().synchronize()
                    except Exception as e:   # noqa: BLE001 - an experiment: report and go on
                        print(f"   {tag:10s} failed: {str(e).splitlines()[0][:100]}", flush=True)
                        continue
                    bad = ""
                    for o in program.outputs:
                        err = relative_error(cp.asnumpy(outs[o.name]), env[o.id], mag[o.id])
                        if not err < (1e-5 if dt == "float32" else 1e-12):
                            bad += f" WRONG {o.name} {err:.1e}"
                    t = timer(bound)[1]
                    print(f"   {tag:10s} {t:8.1f} us  predicted {plan.predicted * 1e6:8.1f}{bad}  {label(plan)}",
                          flush=True)
                cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
