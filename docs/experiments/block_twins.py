"""Plans that differ only in a kernel's instances per block: what the reports measured.

The calibrated model prices a `quad` vector kernel with 8 instances per block (64 threads) and
with 32 (256 threads) within 0.5 % of each other, so such twins sit next to each other in its
order, and whichever is first is a coin toss.  This rebuilds, on the CPU, the ranked plans of
every script of the random-script reports given (same generator, seed, sizes and dtype; the
shipped calibration), matches each measured rank by its predicted time (a report made by older
code may rank differently: unmatched ranks are skipped), finds pairs that differ only in
instances per block, and prints the measured ratio (fewer / more instances per block).

    PYTHONPATH=src python3 docs/experiments/block_twins.py docs/results/random-report/H100-float32-n8192.json ...
"""
import itertools
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import kfuse
from kfuse.bench.harness import sequence_dims
from kfuse.frontend.random_scripts import random_script
from kfuse.library.loader import load_library


def main(paths):
    lib = load_library()
    for path in paths:
        d = json.loads(Path(path).read_text())
        h = d["header"]
        ratios = []
        for seq in d["sequences"]:
            seed = int(seq["name"].lower().removeprefix("random"))
            text = random_script(lib, seed).text
            probe = kfuse.compile(text, dtype=h["dtype"], tuned=False)
            dims = sequence_dims(probe.program, h["n"], h["N"])
            sizes = {dd.name: dims[dd.id] for dd in probe.program.dims}
            c = kfuse.compile(text, dtype=h["dtype"], sizes=sizes, tuned=False)
            plans = list(itertools.islice(c.search.plans(), h["top"]))
            measured = {}
            for m in seq["measured"]:
                p = plans[m["rank"] - 1] if m["rank"] <= len(plans) else None
                if p is not None and abs(p.predicted * 1e6 - m["predicted_us"]) < 0.05:
                    measured[m["rank"] - 1] = (p, m["measured_us"])
            for (a, (pa, ta)), (b, (pb, tb)) in itertools.combinations(sorted(measured.items()), 2):
                if len(pa.kernels) != len(pb.kernels):
                    continue
                diff = [(ka, kb) for ka, kb in zip(pa.kernels, pb.kernels) if ka != kb]
                if len(diff) != 1:
                    continue
                ka, kb = diff[0]
                if ka.ipb == kb.ipb or replace(ka, ipb=kb.ipb) != kb:
                    continue
                small, large = (ta, tb) if ka.ipb < kb.ipb else (tb, ta)
                ratios.append((small / large, seq["name"], min(ka.ipb, kb.ipb), max(ka.ipb, kb.ipb),
                               [kc.variant.name for kc in ka.calls], a + 1, b + 1))
        print(f"{Path(path).name}: {len(ratios)} twin pair(s)")
        if ratios:
            rs = [r[0] for r in ratios]
            print(f"   measured (fewer / more instances per block): median {statistics.median(rs):.3f}, "
                  f"min {min(rs):.3f}, max {max(rs):.3f}; fewer faster in {sum(r < 0.99 for r in rs)}, "
                  f"more faster in {sum(r > 1.01 for r in rs)}")
            for r in sorted(ratios, reverse=True)[:4]:
                print(f"   {r[1]} B{r[2]} vs B{r[3]} {'+'.join(r[4])} ranks {r[5]}/{r[6]}: {r[0]:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
