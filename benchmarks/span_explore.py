"""Wider spans (instances across the loop axis per block): the model's top plans of each sequence
with the spans of kfuse.fusion.space.SPANS replaced, checked against the reference and timed
(cold L2, median of CUDA events), each plan printed with its span, unroll and variants.

    python benchmarks/span_explore.py --spans 1,2,4,8 SEQ:TOP ...
"""
import argparse
from pathlib import Path

import kfuse
import kfuse.fusion.space as space
from kfuse.tuning_run import measure_plans, search_dims

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seqs", nargs="+")
    ap.add_argument("--spans", default="1,2,4,8")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    space.SPANS = tuple(int(x) for x in a.spans.split(","))
    for item in a.seqs:
        seq, top = item.split(":")
        c = kfuse.compile(ROOT / "examples" / f"{seq}.kf", tuned=False)
        p = c.program
        size = 8192 if any(x.type == "matrix" for x in p.values) else 2**26
        dims = search_dims(c, {d.name: size for d in p.dims})
        plans = [pl for _, pl in zip(range(int(top)), c.search.plans())]
        res, _ = measure_plans(c, plans, dims, reps=a.reps, log=lambda m: None)
        for t, n, _ in sorted(res, key=lambda r: r[0]):
            ks = "; ".join(f"{k.loop} S{k.span} U{k.unroll} " + "/".join(f"{kc.variant.name}{dict(kc.macros).get('BY', '')}" for kc in k.calls)
                           for k in plans[n].kernels)
            print(f"{seq:8s} plan {n + 1:3d} {t:8.1f} us (predicted {plans[n].predicted * 1e6:6.1f})  {ks}",
                  flush=True)


if __name__ == "__main__":
    main()
