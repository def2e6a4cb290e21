"""Wider spans (instances across the loop axis per block): the model's top plans of each sequence
with the spans of the nested kernels replaced (``PlanSearch(spans=...)``), checked against the reference and timed
(cold L2, median of CUDA events), each plan printed with its span, unroll and variants.

    python docs/experiments/span_explore.py --spans 1,2,4,8 SEQ:TOP ...
"""
import argparse

from explore_util import describe, top_plans

from kfuse.tuning.measure import measure_plans


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seqs", nargs="+")
    ap.add_argument("--spans", default="1,2,4,8")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    spans = tuple(int(x) for x in a.spans.split(","))
    for item in a.seqs:
        seq, top = item.split(":")
        c, dims, plans = top_plans(seq, int(top), spans=spans)
        res, _ = measure_plans(c, plans, dims, reps=a.reps, log=lambda m: None)
        for t, n, _ in sorted(res, key=lambda r: r[0]):
            ks = describe(plans[n])
            print(f"{seq:8s} plan {n + 1:3d} {t:8.1f} us (predicted {plans[n].predicted * 1e6:6.1f})  {ks}",
                  flush=True)


if __name__ == "__main__":
    main()
