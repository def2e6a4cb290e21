"""The first plans that vector calls on the rows of strips changed, measured: for every script,
dtype and size class of plan_identity.py whose first plan differs from a record made before the
change, the old first plan (from the record) and the new one, timed on the GPU (median of CUDA-event
timings, cold L2) on the same fresh inputs, each checked against the float64 reference first.

    PYTHONPATH=/tmp/old/src python3 docs/experiments/plan_identity.py /tmp/plans_old.json   # before
    PYTHONPATH=src python3 docs/experiments/vector_on_strips_changed.py /tmp/plans_old.json \
        --prepare docs/experiments/vector_on_strips_changed.json          # the changed cases (CPU)
    PYTHONPATH=src python3 docs/experiments/vector_on_strips_changed.py docs/experiments/vector_on_strips_changed.json
"""
import argparse
import json
import statistics
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.ir.plan import plan_from_json
from kfuse.library.loader import load_library
from kfuse.reference import device_case, evaluate, relative_error

from plan_identity import record, same_plan, scripts, small_sizes


def timed(prog, dims, timer, tol):
    import cupy as cp
    dev, host, poisoned = device_case(prog.program, dims, prog.dtype, seed=3)
    bound = prog.bind(out=poisoned, **dev)
    bound(sync=True)
    ref, mag = evaluate(prog.program, host), evaluate(prog.program, host, magnitude=True)
    err = max(relative_error(cp.asnumpy(poisoned[v.name]), ref[v.id], mag[v.id]) for v in prog.program.outputs)
    assert err < tol, (prog.describe(), err)
    return timer(bound)[1]


def prepare(record_path: str, out_path: str) -> None:
    """The cases whose first plan differs from the record: script, dtype, sizes, the old plan."""
    base = json.loads(Path(record_path).read_text())
    lib = load_library()
    cases = []
    for key, text in scripts(lib):
        for dtype in ("float32", "float64"):
            for size in ("default", "small"):
                name = f"{key}/{dtype}/{size}"
                sizes = None if size == "default" else small_sizes(lib, text)
                if not same_plan(record(text, dtype, sizes), base[name], ("describe", "json")):
                    cases.append({"case": name, "text": text, "dtype": dtype, "sizes": sizes,
                                  "old": base[name]["json"]})
    Path(out_path).write_text(json.dumps(cases, indent=0))
    print(f"{len(cases)} of {len(base)} first plans changed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("--prepare", metavar="OUT", help="write the changed cases of the record CASES to OUT (CPU)")
    args = ap.parse_args()
    if args.prepare:
        prepare(args.cases, args.prepare)
        return
    timer = device_timer(reps=20, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s", flush=True)
    ratios = []
    print("| case | old first plan (us) | new first plan (us) | old / new | new plan |")
    print("| --- | ---: | ---: | ---: | --- |")
    for c in json.loads(Path(args.cases).read_text()):
        new = kfuse.compile(c["text"], dtype=c["dtype"], sizes=c["sizes"], tuned=False, name="s")
        old = new.with_plan(plan_from_json(new.program, c["old"]))
        dims = new.search.dims
        tol = 1e-5 if c["dtype"] == "float32" else 1e-12
        t_old, t_new = timed(old, dims, timer, tol), timed(new, dims, timer, tol)
        ratios.append(t_old / t_new)
        print(f"| {c['case']} | {t_old:.1f} | {t_new:.1f} | {t_old / t_new:.2f} | {new.plan.summary()} |", flush=True)
    if ratios:
        print(f"\n{len(ratios)} changed first plans: old / new median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.3f}, max {max(ratios):.3f}; new slower by > 3 %: "
              f"{sum(r < 0.97 for r in ratios)}", flush=True)


if __name__ == "__main__":
    main()
