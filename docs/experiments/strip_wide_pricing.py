"""Strips wider than the calibration's matrix priced from the probe of a strip of its width
(`cost/calibrated.py`, `_probed_macros`): the first plans this changes, timed against the plans
before it on the GPU (median of CUDA-event timings, cold L2, same fresh inputs, each checked
against the float64 reference first).

    PYTHONPATH=src python3 docs/experiments/strip_wide_pricing.py --prepare OLD.json NEW.json CASES.json  # CPU
    PYTHONPATH=src python3 docs/experiments/strip_wide_pricing.py CASES.json                              # GPU

OLD.json / NEW.json: first plans of the examples, CG's step, a lone gemv and random scripts
2000-2039 at n = 12289 and 16384 in both dtypes, written by the tree before and after the change
(the helper at the end of this file, run with each tree on PYTHONPATH).
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.ir.plan import plan_from_json

from vector_on_strips import timed


def prepare(old_path, new_path, out_path):
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    cases = [{"case": k, "text": old[k][2], "old": old[k][1], "n": int(k.split("/")[2]), "dtype": k.split("/")[1]}
             for k in old if old[k][0] != new[k][0]]
    Path(out_path).write_text(json.dumps(cases))
    print(f"{len(cases)} of {len(old)} first plans changed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="?")
    ap.add_argument("--prepare", nargs=3, metavar=("OLD", "NEW", "OUT"))
    args = ap.parse_args()
    if args.prepare:
        prepare(*args.prepare)
        return
    timer = device_timer(reps=20, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s", flush=True)
    print("| case | before (us) | after (us) | before / after | plan after |")
    print("| --- | ---: | ---: | ---: | --- |")
    ratios = []
    for c in json.loads(Path(args.cases).read_text()):
        base = kfuse.compile(c["text"], dtype=c["dtype"], tuned=False)
        new = base.for_sizes({d.id: d.literal or c["n"] for d in base.program.dims})
        old = new.with_plan(plan_from_json(new.program, c["old"]))
        dims = new.search.dims
        tol = 1e-5 if c["dtype"] == "float32" else 1e-11
        (t_old, _), (t_new, _) = timed(old, dims, timer, tol), timed(new, dims, timer, tol)
        ratios.append(t_old / t_new)
        print(f"| {c['case']} | {t_old:.1f} | {t_new:.1f} | {t_old / t_new:.3f} | {new.plan.summary()} |", flush=True)
        old.release(), new.release()
    if ratios:
        print(f"\n{len(ratios)} changed first plans: before / after median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.3f}, max {max(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
