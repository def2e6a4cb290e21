"""gemv row bands in the shipped library (a fallback where no strip of whole rows fits): the first
plans they change, timed against the plans before them on the GPU (median of CUDA-event timings,
cold L2, same fresh inputs, each checked against the float64 reference first).

    PYTHONPATH=/tmp/old/src python3 docs/experiments/row_bands_changed.py --record-extra OLD_EXTRA.json   # CPU, tree before
    PYTHONPATH=src python3 docs/experiments/row_bands_changed.py --prepare PLANS_OLD.json WIDE_OLD.json OLD_EXTRA.json CASES.json
    PYTHONPATH=src python3 docs/experiments/row_bands_changed.py CASES.json                                  # GPU

PLANS_OLD.json: `plan_identity.py`'s record of the tree before (n = 1024 / 2^20 and the defaults);
WIDE_OLD.json: `strip_wide_pricing.py --record`'s (n = 12289 and 16384); OLD_EXTRA.json: a lone
gemv and CG's step at n = 24576 and 32768 (float32) and 24576 (float64).  A case is every first
plan the tree on PYTHONPATH chooses differently.
"""
import argparse
import json
import statistics
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.ir.plan import plan_from_json, plan_to_json
from kfuse.library.loader import load_library
from kfuse.reference import device_case, evaluate, relative_error

from plan_identity import scripts, small_sizes
from strip_wide_pricing import CG, GEMV

EXTRA = [(name, text, dt, n) for name, text in (("gemv", GEMV), ("cg", CG))
         for dt, n in (("float32", 24576), ("float32", 32768), ("float64", 24576))]


def compiled(case):
    if "n" in case:
        base = kfuse.compile(case["text"], dtype=case["dtype"], tuned=False)
        return base.for_sizes({d.id: d.literal or case["n"] for d in base.program.dims})
    return kfuse.compile(case["text"], dtype=case["dtype"], sizes=case["sizes"], tuned=False, name="s")


def record_extra(out_path):
    out = {}
    for name, text, dt, n in EXTRA:
        prog = compiled({"text": text, "dtype": dt, "n": n})
        out[f"{name}/{dt}/{n}"] = [prog.plan.summary(), plan_to_json(prog.plan), text]
    Path(out_path).write_text(json.dumps(out))


def prepare(plans_old, wide_old, extra_old, out_path):
    lib = load_library()
    old = json.loads(Path(plans_old).read_text())
    cases = []
    for key, text in scripts(lib):
        for dt in ("float32", "float64"):
            for size in ("default", "small"):
                k = f"{key}/{dt}/{size}"
                c = {"case": k, "text": text, "dtype": dt, "old": old[k]["json"],
                     "sizes": None if size == "default" else small_sizes(lib, text)}
                if compiled(c).plan.describe() != old[k]["describe"]:
                    cases.append(c)
    n_id = len(cases)
    for path in (wide_old, extra_old):
        for k, (summary, plan, text) in json.loads(Path(path).read_text()).items():
            c = {"case": k, "text": text, "dtype": k.split("/")[1], "n": int(k.split("/")[2]), "old": plan}
            if compiled(c).plan.summary() != summary:
                cases.append(c)
    Path(out_path).write_text(json.dumps(cases))
    print(f"{n_id} of {len(old)} plan_identity first plans changed; {len(cases) - n_id} at n = 12289 and above")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="?")
    ap.add_argument("--prepare", nargs=4, metavar=("PLANS_OLD", "WIDE_OLD", "OLD_EXTRA", "OUT"))
    ap.add_argument("--record-extra", metavar="OUT")
    args = ap.parse_args()
    if args.record_extra:
        record_extra(args.record_extra)
        return
    if args.prepare:
        prepare(*args.prepare)
        return
    timer = device_timer(reps=20, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s", flush=True)
    print("| case | before (us) | after (us) | before / after | plan after |")
    print("| --- | ---: | ---: | ---: | --- |")
    import cupy as cp
    ratios = []
    for c in json.loads(Path(args.cases).read_text()):
        new = compiled(c)
        old = new.with_plan(plan_from_json(new.program, c["old"]))
        dims = new.search.dims if "n" not in c else {d.id: d.literal or c["n"] for d in new.program.dims}
        tol = 1e-5 if c["dtype"] == "float32" else 1e-11
        dev, host, _ = device_case(new.program, dims, c["dtype"], seed=1)      # one case for both plans
        ref, mag = evaluate(new.program, host), evaluate(new.program, host, magnitude=True)
        times = []
        for prog in (old, new):
            out = {v.name: cp.full(tuple(dims[d] for d in v.dims), cp.nan, dtype=c["dtype"]) for v in prog.program.outputs}
            bound = prog.bind(out=out, **dev)
            bound(sync=True)
            err = max(relative_error(cp.asnumpy(out[v.name]), ref[v.id], mag[v.id]) for v in prog.program.outputs)
            assert err < tol, (c["case"], prog.plan.summary(), err)
            times.append(timer(bound)[1])
        t_old, t_new = times
        ratios.append(t_old / t_new)
        print(f"| {c['case']} | {t_old:.1f} | {t_new:.1f} | {t_old / t_new:.3f} | {new.plan.summary()} |", flush=True)
        old.release(), new.release()
        del dev, host, ref, mag
    if ratios:
        print(f"\n{len(ratios)} changed first plans: before / after median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.3f}, max {max(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
