"""Do a plan's kernels find what the kernels before them touched in L2?  (issue 15, CPU analysis)

At n <= 2048 a script's arrays fit the H100's 50 MB L2, and the random-script reports' misses there
are plans of the same predicted time that differ in which kernel reads what an earlier kernel
touched.  This reads the reports' measured top 20 (``docs/results/random-report/*.json``),
plans every script again in this tree (the same first 20 plans, matched by their summaries) and
computes per plan the bytes its kernels load that an earlier kernel of the plan loaded or stored,
with at most ``L2`` distinct bytes touched in between (an LRU over whole arrays).  It then asks
whether ranking by ``predicted - w * those bytes`` would pick better first plans, for a few
weights, fitting on some reports and testing on the others.

    PYTHONPATH=src python3 docs/experiments/l2_reuse.py > docs/experiments/l2-reuse-cpu.txt
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORTS = HERE.parent / "results" / "random-report"


def plan_features(plan, entries: dict[int, int], itemsize: int, l2: float) -> dict:
    """Bytes loaded from arrays an earlier kernel touched within ``l2`` bytes (reread), bytes the
    last kernel stores (tail), bytes stored by every kernel (stored)."""
    touched: list[tuple[int, int]] = []            # (value id, bytes), most recent last
    reread = stored = 0
    for k, spec in enumerate(plan.kernels):
        made = {o.id for kc in spec.calls for o in kc.call.outputs}
        loads = {a.id for kc in spec.calls for a in kc.call.args
                 if hasattr(a, "type") and a.type in ("vector", "matrix") and a.id not in made}
        for v in loads:
            since = 0
            for w, b in reversed(touched):
                since += b
                if w == v:
                    if since <= l2:
                        reread += entries[v] * itemsize
                    break
        for v in sorted(loads) + sorted(spec.stores):
            touched = [t for t in touched if t[0] != v] + [(v, entries[v] * itemsize)]
        stored += sum(entries[v] * itemsize for v in spec.stores)
    tail = sum(entries[v] * itemsize for v in plan.kernels[-1].stores)
    return {"reread": reread, "tail": tail, "stored": stored}


def matched_plans(files: list[str]):
    """Per script of the reports (files under ``REPORTS``): (report header, report entry, the script's
    plan search in this tree, [(rank, plan, measured entry)] for the measured plans this tree ranks
    at the same rank with the same summary).  Shared by ``small_ties.py`` and ``vector_ties.py``."""
    import kfuse
    from kfuse.bench.harness import sequence_dims
    from kfuse.frontend.random_scripts import random_script
    from kfuse.library.loader import load_library
    lib = load_library()
    for f in files:
        d = json.loads((REPORTS / f).read_text())
        h = d["header"]
        for seq in d["sequences"]:
            text = random_script(lib, int(seq["name"].lower().removeprefix("random"))).text
            probe = kfuse.compile(text, dtype=h["dtype"], tuned=False, name="s")
            dims = sequence_dims(probe.program, h["n"], h["N"])
            sizes = {dd.name: dims[dd.id] for dd in probe.program.dims}
            search = kfuse.compile(text, dtype=h["dtype"], sizes=sizes, tuned=False, name="s").search
            measured = {m["rank"]: m for m in seq["measured"]}
            plans = itertools.islice(search.plans(), len(seq["measured"]))
            yield h, seq, search, [(k, p, measured[k]) for k, p in enumerate(plans, 1)
                                   if k in measured and measured[k]["plan"] == p.summary()]


def load_cases(files: list[str], l2: float) -> list[dict]:
    cases = []
    for h, seq, search, matched in matched_plans(files):
        itemsize = 8 if h["dtype"] == "float64" else 4
        rows = [{"rank": k, "pred": m["predicted_us"], "meas": m["measured_us"],
                 **plan_features(p, search.entries, itemsize, l2)} for k, p, m in matched]
        if len(rows) >= 0.8 * len(seq["measured"]) and any(r["rank"] == 1 for r in rows):
            cases.append({"name": seq["name"], "rows": rows})
    return cases


def first_ratio(case: dict, w_reread: float, w_tail: float) -> float:
    """Measured time of the plan ranked first by the adjusted prediction over the best measured."""
    rows = case["rows"]
    score = lambda r: (r["pred"] - w_reread * r["reread"] / 1e6 - w_tail * r["tail"] / 1e6, r["rank"])
    pick = min(rows, key=score)
    return pick["meas"] / min(r["meas"] for r in rows)


def summary(cases: list[dict], w_reread: float, w_tail: float) -> str:
    r = [first_ratio(c, w_reread, w_tail) for c in cases]
    within = sum(x <= 1.05 for x in r)
    geo = math.exp(statistics.fmean(math.log(x) for x in r))
    return f"{within:3d} of {len(r):3d} within 5 %, geomean {geo:.4f}, worst {max(r):.3f}"


def ties(files: list[str]) -> None:
    """Per report: first choices more than 5 % off the best of the top 20, and how many of those the
    best plan predicted within 1 % of the first would put within 5 % (ties the model cannot break)."""
    for f in files:
        d = json.loads((REPORTS / f).read_text())
        miss = fixed = scripts = 0
        for seq in d["sequences"]:
            m = seq["measured"]
            if not m or m[0]["rank"] != 1:
                continue
            scripts += 1
            best = min(x["measured_us"] for x in m)
            if m[0]["measured_us"] / best > 1.05:
                miss += 1
                tie = min(x["measured_us"] for x in m if x["predicted_us"] <= m[0]["predicted_us"] * 1.01)
                fixed += tie / best <= 1.05
        print(f"{f}: {scripts} scripts, {miss} first choices over 1.05x, {fixed} of them within 5 % by a 1 % tie")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--l2", type=float, default=40e6, help="bytes an array may lie back and still be reread from L2")
    args = ap.parse_args()
    groups = {
        "fit (seeds 2000, 2100)": ["H100-float32-n1024.json", "H100-float32-n1024-seed2100.json",
                                   "H100-float64-n1024-paired.json"],
        "test (seeds 2700, 2800)": ["H100-float32-n1024-seed2700.json", "H100-float64-n1024-seed2700.json",
                                    "H100-float32-n2048-seed2800-after.json", "H100-float64-n2048-seed2800-after.json"],
        "large (no change expected)": ["H100-float32-n4096-seed2800.json", "H100-float64-n4096-seed2800.json",
                                       "H100-float32-n8192-seed2700.json", "H100-float64-n8192-seed2700.json"],
    }
    ties(groups["fit (seeds 2000, 2100)"] + groups["test (seeds 2700, 2800)"])
    print()
    loaded = {g: load_cases(fs, args.l2) for g, fs in groups.items()}
    for g, cases in loaded.items():
        print(f"## {g}: {len(cases)} scripts matched")
        moving = sum(len({r['reread'] for r in c['rows']}) > 1 for c in cases)
        print(f"scripts whose top plans differ in reread bytes: {moving}")
        for wr in (0.0, 0.05, 0.1, 0.2, 0.33, 0.5):        # us per MB
            for wt in (0.0, 0.1, 0.2):
                print(f"w_reread {wr:4.2f} us/MB, w_tail {wt:3.1f}: {summary(cases, wr, wt)}")
        print()


if __name__ == "__main__":
    main()
