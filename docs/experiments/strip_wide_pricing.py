"""Strips wider than the calibration's matrix priced from the probe of a strip of its width
(`cost/calibrated.py`, `_probed_macros`): the first plans this changes, timed against the plans
before it on the GPU (median of CUDA-event timings, cold L2, same fresh inputs, each checked
against the float64 reference first).

    PYTHONPATH=/tmp/old/src python3 docs/experiments/strip_wide_pricing.py --record OLD.json   # CPU, tree before
    PYTHONPATH=src python3 docs/experiments/strip_wide_pricing.py --record NEW.json            # CPU, tree after
    PYTHONPATH=src python3 docs/experiments/strip_wide_pricing.py --prepare OLD.json NEW.json CASES.json  # CPU
    PYTHONPATH=src python3 docs/experiments/strip_wide_pricing.py CASES.json                              # GPU

--record: the first plans of the examples, CG's step, a lone gemv and random scripts 2000-2039 at
n = 12289 and 16384 in both dtypes, by the kfuse tree on PYTHONPATH.
"""
import argparse
import json
import statistics
from pathlib import Path

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.ir.plan import plan_from_json

from vector_on_strips import timed


CG = """matrix A; vector x, r, p, q, x1, r1, p1; scalar rr, pq, al, rr1; input A, x, r, p, rr;
q = gemv(A, p); pq = dot(p, q); al = rr / pq; x1 = axpy(al, p, x); r1 = axpy(-al, q, r);
rr1 = dot(r1, r1); p1 = axpy(rr1 / rr, p, r1); return x1, r1, p1, rr1;"""
GEMV = "matrix A; vector p, q; input A, p; q = gemv(A, p); return q;"


def record(out_path):
    """First plans (summary, plan JSON, script text) by case name ``script/dtype/n``."""
    from kfuse.frontend.random_scripts import random_script
    from kfuse.ir.plan import plan_to_json
    from kfuse.library.loader import load_library
    lib = load_library()
    texts = {p.stem: p.read_text() for p in sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.kf"))}
    texts.update({"cg": CG, "gemv": GEMV})
    texts.update({f"r{seed}": random_script(lib, seed).text for seed in range(2000, 2040)})
    out = {}
    for name, text in texts.items():
        for dt in ("float32", "float64"):
            for n in (12289, 16384):
                base = kfuse.compile(text, dtype=dt, tuned=False)
                prog = base.for_sizes({d.id: d.literal or n for d in base.program.dims})
                out[f"{name}/{dt}/{n}"] = [prog.plan.summary(), plan_to_json(prog.plan), text]
    Path(out_path).write_text(json.dumps(out))
    print(f"{len(out)} first plans recorded")


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
    ap.add_argument("--record", metavar="OUT")
    args = ap.parse_args()
    if args.record:
        record(args.record)
        return
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
