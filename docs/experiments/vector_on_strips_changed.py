"""The first plans that ``vector_on_strips=True`` changes, measured: for every script, dtype and
size class of plan_identity.py whose first plan with the option differs from the plan without it,
both plans timed on the GPU (median of CUDA-event timings, cold L2) on the same fresh inputs, each
checked against the float64 reference first.

    PYTHONPATH=src python3 docs/experiments/vector_on_strips_changed.py --prepare CASES.json   # CPU
    PYTHONPATH=src python3 docs/experiments/vector_on_strips_changed.py CASES.json [--limit K]  # GPU
"""
import argparse
import json
import statistics
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.ir.plan import plan_from_json, plan_to_json
from kfuse.library.loader import load_library

from plan_identity import scripts, small_sizes
from vector_on_strips import timed


def prepare(out_path: str) -> None:
    """The cases whose first plan the option changes: script, dtype, sizes, the plan without it."""
    lib = load_library()
    cases, total = [], 0
    for key, text in scripts(lib):
        for dtype in ("float32", "float64"):
            for size in ("default", "small"):
                sizes = None if size == "default" else small_sizes(lib, text)
                off = kfuse.compile(text, dtype=dtype, sizes=sizes, tuned=False, name="s")
                on = kfuse.compile(text, dtype=dtype, sizes=sizes, tuned=False, name="s", vector_on_strips=True)
                total += 1
                if plan_to_json(on.plan) != plan_to_json(off.plan):
                    cases.append({"case": f"{key}/{dtype}/{size}", "text": text, "dtype": dtype, "sizes": sizes,
                                  "off": plan_to_json(off.plan)})
    Path(out_path).write_text(json.dumps(cases, indent=0))
    print(f"{len(cases)} of {total} first plans changed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="?")
    ap.add_argument("--prepare", metavar="OUT", help="write the cases the option changes to OUT (CPU)")
    ap.add_argument("--limit", type=int, default=0, help="measure only every k-th case, k = cases / LIMIT")
    args = ap.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return
    timer = device_timer(reps=20, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s", flush=True)
    ratios = []
    print("| case | without (us) | with vector_on_strips (us) | without / with | plan with | errors |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    cases = json.loads(Path(args.cases).read_text())
    step = max(1, -(-len(cases) // args.limit)) if args.limit else 1
    for c in cases[::step]:
        on = kfuse.compile(c["text"], dtype=c["dtype"], sizes=c["sizes"], tuned=False, name="s", vector_on_strips=True)
        off = on.with_plan(plan_from_json(on.program, c["off"]))
        dims = on.search.dims
        # rounding grows with the sums' length: n = 8192 sums of products chained through ger and
        # madd reached 1.2e-12 (float64) in both plans' range; the GPU tests hold 1e-12 at n <= 4097
        tol = 1e-5 if c["dtype"] == "float32" else 1e-11
        (t_off, e_off), (t_on, e_on) = timed(off, dims, timer, tol), timed(on, dims, timer, tol)
        ratios.append(t_off / t_on)
        print(f"| {c['case']} | {t_off:.1f} | {t_on:.1f} | {t_off / t_on:.2f} | {on.plan.summary()} "
              f"| {e_off:.1e} / {e_on:.1e} |", flush=True)
    if ratios:
        print(f"\n{len(ratios)} changed first plans: without / with median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.3f}, max {max(ratios):.3f}; slower with the option by > 3 %: "
              f"{sum(r < 0.97 for r in ratios)}", flush=True)


if __name__ == "__main__":
    main()
