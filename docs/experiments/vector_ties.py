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
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from l2_reuse import matched_plans  # noqa: E402


def kernel_key(impl, code) -> tuple:
    return (tuple(sorted(impl.calls)), tuple(kc.variant.name for kc in code.spec.calls), code.spec.nesting,
            code.spec.ipb, code.spec.unroll, code.spec.loop, code.spec.span)


def pairs(files: list[str]) -> dict:
    out: dict = collections.defaultdict(list)
    for _, _, search, matched in matched_plans(files):
        code_of = {id(impl): code for ranked in search.ranked.values() for _, impl, code in ranked}
        rows = [(m["measured_us"], [kernel_key(im, code_of[id(im)]) for im in p.implementations]) for _, p, m in matched]
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
