"""Vector kernels in tied plans: instances per block and unroll (issue 15, CPU analysis of reports).

For every script of the given random-script reports (``docs/results/random-report/*.json``), re-plans
it in this tree, matches the measured top 20 by rank and summary, and takes every pair of plans that
differ in exactly one kernel, a vector (unnested) kernel with the same calls and variants, in its
(instances per block, unroll) only.  Prints, per variant family and pair of choices (a, b), the
median of time(a) / time(b) and how often each was more than 2 % faster.

    PYTHONPATH=src python3 docs/experiments/vector_ties.py H100-float32-n1024-seed2700.json ...
"""
from __future__ import annotations

import collections
import itertools
import json
import statistics
import sys
from pathlib import Path

import kfuse
from kfuse.bench.harness import sequence_dims
from kfuse.frontend.random_scripts import random_script
from kfuse.library.loader import load_library

REPORTS = Path(__file__).resolve().parent.parent / "results" / "random-report"


def kernel_key(impl, code) -> tuple:
    return (tuple(sorted(impl.calls)), tuple(kc.variant.name for kc in code.spec.calls), code.spec.nesting,
            code.spec.ipb, code.spec.unroll, code.spec.loop, code.spec.span)


def pairs(files: list[str]) -> dict:
    lib = load_library()
    out: dict = collections.defaultdict(list)
    for f in files:
        d = json.loads((REPORTS / f).read_text())
        h = d["header"]
        for seq in d["sequences"]:
            text = random_script(lib, int(seq["name"].lower().removeprefix("random"))).text
            probe = kfuse.compile(text, dtype=h["dtype"], tuned=False, name="s")
            dims = sequence_dims(probe.program, h["n"], h["N"])
            sizes = {dd.name: dims[dd.id] for dd in probe.program.dims}
            search = kfuse.compile(text, dtype=h["dtype"], sizes=sizes, tuned=False, name="s").search
            code_of = {id(impl): code for ranked in search.ranked.values() for _, impl, code in ranked}
            measured = {m["rank"]: m for m in seq["measured"]}
            rows = []
            for k, plan in enumerate(itertools.islice(search.plans(), len(seq["measured"])), 1):
                m = measured.get(k)
                if m is not None and m["plan"] == plan.summary():
                    rows.append((m["measured_us"], [kernel_key(im, code_of[id(im)]) for im in plan.implementations]))
            for (ta, ka), (tb, kb) in itertools.combinations(rows, 2):
                diff = [(a, b) for a, b in zip(ka, kb) if a != b] if len(ka) == len(kb) else []
                if len(diff) != 1:
                    continue
                a, b = diff[0]
                if a[:3] != b[:3] or a[2] != 1 or a[5:] != b[5:]:
                    continue
                family = a[1][0] if len(set(a[1])) == 1 else "mixed"
                ca, cb, r = (a[3], a[4]), (b[3], b[4]), ta / tb
                if ca > cb:
                    ca, cb, r = cb, ca, 1 / r
                out[(family, ca, cb)].append(r)
    return out


def main() -> None:
    for (family, ca, cb), r in sorted(pairs(sys.argv[1:]).items()):
        if len(r) >= 3:
            print(f"{family:6s} (ipb, unroll) a = {ca}, b = {cb}: {len(r):5d} pairs, median a/b "
                  f"{statistics.median(r):.3f}, a faster in {sum(x < 0.98 for x in r)}, b faster in {sum(x > 1.02 for x in r)}")


if __name__ == "__main__":
    main()
