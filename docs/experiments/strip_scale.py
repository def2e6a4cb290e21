"""Strips priced by the columns they hold inside the matrix (tried, not merged): for the examples
with gemv / gemtv calls and a lone gemv, in both dtypes and at sizes whose rows are not a strip's
width, the first choice under kfuse's scale ("old": `CalibratedModel._strip_scale`, only strips
wider than the calibration's matrix scaled, by their width NC) and under the scale tried ("new":
every strip by min(row, NC) over its probe's min(n_cal, NC)), both measured in turns where they
differ; every result checked against float64 first.  Output: `strip-scale-H100.txt`.

    PYTHONPATH=src python3 docs/experiments/strip_scale.py [--sizes 1000,4097,6000,12000] [--rounds 3]
"""
import argparse
import sys

from strip_standalone import SCRIPTS, plan_at as kfuse_plan_at   # the same scripts, planned the same way

from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.cost import calibrated
from kfuse.reference import device_case, evaluate, relative_error
from kfuse.runtime.gpu import cupy
from kfuse.runtime.timing import quartiles_us


def inbounds_scale(self, L, spec, dims):
    """The scale tried: a strip's columns inside the matrix over those its probe held."""
    n_cal = int(self.cal.meta.get("sizes", {}).get("n", 0) or 0)
    if not n_cal:
        return 1.0
    ratios = [min(dims[L.axis_dims[n]], L.axis_extent[n]) / min(n_cal, L.axis_extent[n])
              for n, a in enumerate(("i", "j")[:len(L.axis_extent)])
              if any(a in kc.variant.whole for kc in spec.calls)]
    return max(ratios, default=1.0)


def plan_at(script, dtype: str, n: int, old: bool):
    kfuse_scale = calibrated.CalibratedModel._strip_scale
    if not old:
        calibrated.CalibratedModel._strip_scale = inbounds_scale
    try:
        return kfuse_plan_at(script, dtype, n)
    finally:
        calibrated.CalibratedModel._strip_scale = kfuse_scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,4097,6000,12000")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scripts", default=",".join(SCRIPTS))
    args = ap.parse_args()
    cp = cupy()
    bw = copy_bandwidth(2**30, device_timer(reps=20, warmup=3))
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for dt in args.dtypes.split(","):
        for n in map(int, args.sizes.split(",")):
            for name in args.scripts.split(","):
                old, new = plan_at(SCRIPTS[name], dt, n, True), plan_at(SCRIPTS[name], dt, n, False)
                same = old.plan.summary() == new.plan.summary() and \
                    [(k.loop, k.unroll, k.span, k.ipb) for k in old.plan.kernels] == \
                    [(k.loop, k.unroll, k.span, k.ipb) for k in new.plan.kernels]
                head = f"{name} {dt} n={n}"
                if same:
                    print(f"{head}: same first choice ({new.plan.summary()})", flush=True)
                    continue
                program = new.program
                dims = {d: n for v in list(program.inputs) + list(program.outputs) for d in v.dims}
                inputs, host, poisoned = device_case(program, dims, dt, seed=n)
                env, mag = evaluate(program, host), evaluate(program, host, magnitude=True)
                bound, bad = [], ""
                for prog in (old, new):
                    outs = {k: a.copy() for k, a in poisoned.items()}
                    b = prog.bind(out=outs, **inputs)
                    b(sync=True)
                    for o in program.outputs:
                        err = relative_error(cp.asnumpy(outs[o.name]), env[o.id], mag[o.id])
                        if not err < (1e-5 if dt == "float32" else 1e-12):
                            bad += f" WRONG {o.name} {err:.1e}"
                    bound.append(b)
                times = [[], []]
                for _ in range(args.rounds):
                    for k, b in enumerate(bound):
                        times[k].append(quartiles_us(b, reps=30, warmup=3, cold_l2=True).median)
                med = [sorted(t)[len(t) // 2] for t in times]
                print(f"{head}: old {med[0]:8.1f} us (predicted {old.plan.predicted * 1e6:7.1f})  "
                      f"new {med[1]:8.1f} us (predicted {new.plan.predicted * 1e6:7.1f})  "
                      f"new/old {med[1] / med[0]:.3f}{bad}", flush=True)
                print(f"    old: {old.plan.summary()}\n    new: {new.plan.summary()}", flush=True)
                cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
