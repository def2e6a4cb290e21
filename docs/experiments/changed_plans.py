"""First plans that a planner change moves, timed side by side (issue 15).

On the CPU, ``--prepare`` plans random scripts (default lengths, seeds ``--seeds A B``) in both
dtypes at every matrix side of ``--sizes`` (vectors at n^2) with each kfuse source tree named by
``--tree NAME=SRC`` (a fresh process per tree) and keeps the cases whose first plans differ, with
every tree's plan in JSON.  On the GPU, each case's plans are rebuilt in this tree's kfuse (a plan's
JSON names calls, variants and choices: any tree builds it), checked against the float64 reference
on fresh inputs (outputs poisoned), and timed in turns (cold L2, median of CUDA events).

    PYTHONPATH=src python3 docs/experiments/changed_plans.py --prepare cases.json \\
        --tree before=/tmp/old/src --tree after=src --seeds 6000 6040 --sizes 1024 2048 4096 8192
    PYTHONPATH=src python3 docs/experiments/changed_plans.py cases.json --rounds 3      # GPU
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def _plans(seeds: range, sizes: list[int]) -> dict[str, dict]:
    """Case key -> (script text, dtype, sizes, first plan JSON), in this process's kfuse."""
    import kfuse
    from kfuse.frontend import parse_script
    from kfuse.frontend.random_scripts import random_script
    from kfuse.ir.plan import plan_to_json
    from kfuse.library.loader import load_library
    lib = load_library()
    out = {}
    for seed in seeds:
        text = random_script(lib, seed).text
        prog = parse_script(text, lib)
        matrix = {d for v in prog.values if v.type == "matrix" for d in v.dims}
        for n in sizes:
            dims = {d.name: (n if matrix else n * n) for d in prog.dims}
            for dtype in ("float32", "float64"):
                c = kfuse.compile(text, dtype=dtype, sizes=dims, tuned=False, name="s")
                out[f"random{seed}/{dtype}/n{n}"] = {"text": text, "dtype": dtype, "sizes": dims,
                                                     "plan": plan_to_json(c.plan), "summary": c.plan.summary()}
    return out


def prepare(args) -> None:
    trees = dict(t.split("=", 1) for t in args.tree)
    found = {}
    for name, src in trees.items():
        env = dict(os.environ, PYTHONPATH=src)
        cmd = [sys.executable, __file__, "--emit", "--seeds", *map(str, args.seeds),
               "--sizes", *map(str, args.sizes)]
        done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
        found[name] = json.loads(done.stdout.splitlines()[-1])
    first = next(iter(found.values()))
    cases = []
    for key, case in first.items():
        plans = {name: found[name][key]["plan"] for name in trees}
        if len({json.dumps(p, sort_keys=True) for p in plans.values()}) > 1:
            cases.append({"case": key, "text": case["text"], "dtype": case["dtype"], "sizes": case["sizes"],
                          "plans": plans, "summaries": {name: found[name][key]["summary"] for name in trees}})
    Path(args.prepare).write_text(json.dumps(cases, indent=0))
    print(f"{len(cases)} of {len(first)} first plans differ between {', '.join(trees)}")


def measure(args) -> None:
    import kfuse
    from kfuse.bench.harness import copy_bandwidth, device_timer
    from kfuse.ir.plan import plan_from_json
    sys.path.insert(0, str(Path(__file__).parent))
    from vector_on_strips import timed
    timer = device_timer(reps=20, warmup=3)
    print(f"copy bandwidth: {copy_bandwidth(2**30, timer):.0f} GB/s", flush=True)
    cases = json.loads(Path(args.cases).read_text())
    names = list(cases[0]["plans"]) if cases else []
    print("| case | " + " | ".join(f"{n} (us)" for n in names) + " | " +
          " | ".join(f"{names[0]} / {n}" for n in names[1:]) + " |")
    print("|" + " --- |" * (1 + 2 * len(names) - 1))
    ratios: dict[str, list[float]] = {n: [] for n in names[1:]}
    for c in cases:
        base = kfuse.compile(c["text"], dtype=c["dtype"], sizes=c["sizes"], tuned=False, name="s")
        dims = base.search.dims
        progs = {n: base.with_plan(plan_from_json(base.program, p)) for n, p in c["plans"].items()}
        tol = 1e-5 if c["dtype"] == "float32" else 1e-11
        times: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(args.rounds):
            for n in names:
                times[n].append(timed(progs[n], dims, timer, tol)[0])
        t = {n: statistics.median(v) for n, v in times.items()}
        for n in names[1:]:
            ratios[n].append(t[names[0]] / t[n])
        print(f"| {c['case']} | " + " | ".join(f"{t[n]:.1f}" for n in names) + " | "
              + " | ".join(f"{t[names[0]] / t[n]:.3f}" for n in names[1:]) + " |", flush=True)
        for p in progs.values():
            p.release()
    for n, r in ratios.items():
        if r:
            print(f"\n{names[0]} / {n} over {len(r)} cases: median {statistics.median(r):.3f}, geometric mean "
                  f"{statistics.geometric_mean(r):.3f}, min {min(r):.3f}, max {max(r):.3f}; {n} slower by > 3 %: "
                  f"{sum(x < 0.97 for x in r)}, faster by > 3 %: {sum(x > 1.03 for x in r)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="?")
    ap.add_argument("--prepare", metavar="OUT")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=SRC")
    ap.add_argument("--seeds", type=int, nargs=2, default=[6000, 6040])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--emit", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.emit:
        print(json.dumps(_plans(range(*args.seeds), args.sizes)))
    elif args.prepare:
        prepare(args)
    else:
        measure(args)


if __name__ == "__main__":
    main()
