"""Would a price on few loads in flight separate the small-size ties?  (issue 15, CPU analysis)

Re-plans the random-script reports' scripts at n = 1024 and 2048 (``docs/results/random-report``),
matches their measured top 20 and, per plan, adds to the prediction a penalty for each kernel whose
grid holds few loads in flight: ``w * transfer * max(0, c / (occupancy x unroll) - 1)`` (occupancy:
the grid's threads over the GPU's, at most 1; unroll counted up to the serial iterations; mode 0
leaves the unroll out).  Weights are tried on seeds 2000 and 2100 (fit) and read on 2700 and 2800
(test); the large-size reports must not move.

    PYTHONPATH=src python3 docs/experiments/small_ties.py
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from l2_reuse import matched_plans  # noqa: E402
GROUPS = {
    "fit": ["H100-float32-n1024.json", "H100-float32-n1024-seed2100.json", "H100-float64-n1024-paired.json"],
    "test": ["H100-float32-n1024-seed2700.json", "H100-float64-n1024-seed2700.json",
             "H100-float32-n2048-seed2800-after.json", "H100-float64-n2048-seed2800-after.json"],
    "large": ["H100-float32-n4096-seed2800.json", "H100-float64-n4096-seed2800.json",
              "H100-float32-n8192-seed2700.json", "H100-float64-n8192-seed2700.json"],
}


def kernel_facts(search, code, t: float) -> dict:
    L = code.launch
    it = search._iterations(code)
    grid = L.grid(search.dims, it)
    parts = search.model.kernel_parts(code, search.dims, search.itemsize)
    return {"occ": min(1.0, grid * L.threads / (132 * 2048)), "u": code.spec.unroll, "it": it,
            "transfer": parts["transfer"] * 1e6, "t": t * 1e6}


def cases(files: list[str]) -> list[dict]:
    """Per script of the reports: its measured plans (rank, predicted and measured us, kernel facts),
    those whose summaries this tree's ranking reproduces at the same rank."""
    out = []
    for _, seq, search, matched in matched_plans(files):
        code_of = {id(impl): (t, code) for ranked in search.ranked.values() for t, impl, code in ranked}
        rows = [{"rank": k, "pred": m["predicted_us"], "meas": m["measured_us"],
                 "kernels": [kernel_facts(search, code_of[id(im)][1], code_of[id(im)][0]) for im in p.implementations]}
                for k, p, m in matched]
        if rows and rows[0]["rank"] == 1:
            out.append({"name": seq["name"], "rows": rows})
    return out


def penalty(k: dict, w: float, c: float, mode: int) -> float:
    mlp = k["occ"] * (min(k["u"], k["it"]) if mode else 1)
    return w * k["transfer"] * max(0.0, c / mlp - 1)


def evaluate(cases: list, w: float, c: float, mode: int) -> str:
    r = []
    for cs in cases:
        rows = cs["rows"]
        pick = min(rows, key=lambda x: (round(x["pred"] + sum(penalty(k, w, c, mode) for k in x["kernels"]), 1), x["rank"]))
        r.append(pick["meas"] / min(x["meas"] for x in rows))
    geo = math.exp(statistics.fmean(map(math.log, r)))
    return f"{sum(x <= 1.05 for x in r):3d} of {len(r):3d} within 5 %, geomean {geo:.4f}, worst {max(r):.3f}"


def main() -> None:
    loaded = {g: cases(fs) for g, fs in GROUPS.items()}
    print("no penalty: " + " | ".join(f"{g} {evaluate(cs, 0, 1, 0)}" for g, cs in loaded.items()))
    for mode in (0, 1):
        for w in (0.02, 0.05, 0.1, 0.2, 0.5, 1.0):
            for c in (0.125, 0.25, 0.5, 1.0, 2.0):
                print(f"mode {mode} w {w} c {c}: " + " | ".join(f"{g} {evaluate(cs, w, c, mode)}" for g, cs in loaded.items()))


if __name__ == "__main__":
    main()
