"""Planning time of a script's first plan on the CPU (issue 15: at most 0.15 s for up to 10 calls).

Times ``kfuse.compile(text, dtype=..., tuned=False)`` of seeded random scripts of 10 calls, one
compile per script, in a process warmed up by one compile of another script (the library loaded
and the modules imported, as a user's second script finds them).  Prints median, 90th percentile,
worst and the count over 0.15 s per set and dtype.

    PYTHONPATH=src python3 docs/experiments/planning_time.py
    PYTHONPATH=src python3 docs/experiments/planning_time.py --against /tmp/old/src --rounds 2

``--size N`` plans every dimension of every script at N (as ``kfuse report --n N --N N`` does;
default: the compile's default sizes, n = 8192 and N = 2^24).

``--against SRC`` compares with another kfuse source tree (e.g. ``git archive <commit> src``
unpacked): the two are timed in turn, in fresh processes, ``--rounds`` times each (old, new,
old, new, ...), and each script's time is its least over the rounds (the machine is shared:
the least is the least disturbed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SETS = {"5000": range(5000, 5100), "3000": range(3000, 3100)}
LIMIT = 0.15


def _time_sets(sets: list[str], dtypes: list[str], calls: int, size: int = 0) -> dict[str, list[float]]:
    import kfuse
    from kfuse.frontend.random_scripts import random_script
    from kfuse.library.loader import load_library

    lib = load_library()
    out: dict[str, list[float]] = {}
    for dtype in dtypes:
        kfuse.compile(random_script(lib, 1, calls=calls).text, dtype=dtype, tuned=False)   # warm-up
        for name in sets:
            times = []
            for seed in SETS[name]:
                text = random_script(lib, seed, calls=calls).text
                sizes = ({d.name: size for d in kfuse.compile(text, tuned=False).program.dims}
                         if size else None)
                t0 = time.perf_counter()
                kfuse.compile(text, dtype=dtype, tuned=False, sizes=sizes)
                times.append(time.perf_counter() - t0)
            out[f"{name}/{dtype}"] = times
    return out


def _summary(times: list[float]) -> str:
    q = sorted(times)
    p90 = q[int(0.9 * (len(q) - 1) + 0.5)]
    over = sum(t > LIMIT for t in q)
    return (f"median {statistics.median(q) * 1e3:6.1f} ms, 90th {p90 * 1e3:6.1f} ms, "
            f"worst {q[-1] * 1e3:6.1f} ms, over {LIMIT:.2f} s: {over}")


def _run(src: str, args) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [sys.executable, __file__, "--json", "--sets", *args.sets, "--dtypes", *args.dtypes,
           "--calls", str(args.calls), "--size", str(args.size)]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=["5000", "3000"], choices=sorted(SETS))
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--size", type=int, default=0, help="plan every dimension at this size (default: the compile's)")
    ap.add_argument("--against", metavar="SRC", help="another kfuse source tree to compare with")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the times as JSON (one process, no summary)")
    args = ap.parse_args()
    if args.json:
        print(json.dumps(_time_sets(args.sets, args.dtypes, args.calls, args.size)))
        return
    own = os.environ.get("PYTHONPATH", "src")
    trees = ([("before", args.against)] if args.against else []) + [("after" if args.against else "this", own)]
    best: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for label, src in trees:
            got = _run(src, args)
            for key, times in got.items():
                old = best.setdefault(label, {}).get(key)
                best[label][key] = times if old is None else [min(a, b) for a, b in zip(old, times)]
    for key in best[trees[0][0]]:
        for label, _ in trees:
            print(f"{key:14s} {label:6s} {_summary(best[label][key])}")
    for label, _ in trees:
        slow = sorted(((t, k, SETS[k.split('/')[0]][n]) for k, ts in best[label].items()
                       for n, t in enumerate(ts)), reverse=True)[:5]
        print(f"{label}: slowest " + ", ".join(f"seed {s} {k.split('/')[1]} {t * 1e3:.0f} ms" for t, k, s in slow))


if __name__ == "__main__":
    main()
