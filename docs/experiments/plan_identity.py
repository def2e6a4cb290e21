"""Plan identity across a change of the planner: record the first plan of a fixed set of scripts,
then check that another kfuse tree chooses the same ones.

For each script, dtype (float32, float64) and size class (the model's default sizes; n = 1024 per
matrix side and N = 2^20 per vector), it keeps the plan's description and JSON form, its predicted
time and per-kernel times, a hash of the generated CUDA source and, beyond the first plan, hashes of
``explain()``, of every fusion's ranked implementations and of the 20 plans ranked first.  Scripts:
random scripts of 10 calls, seeds 5000-5099 and 3000-3099; random scripts of default lengths,
seeds 2000-2039 (the report's); the examples (examples/*.kf).

    PYTHONPATH=/tmp/old/src python3 docs/experiments/plan_identity.py /tmp/plans.json      # record
    PYTHONPATH=src python3 docs/experiments/plan_identity.py /tmp/plans.json --check       # compare
    (``--ignore-cuda``: the plans only, not the generated source)

Predictions must agree to 1e-9 relative; everything else exactly.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
from pathlib import Path

import kfuse
from kfuse.frontend import parse_script
from kfuse.frontend.random_scripts import random_script
from kfuse.ir.plan import plan_to_json
from kfuse.library.loader import load_library

ROOT = Path(__file__).resolve().parents[2]


def scripts(lib):
    for s in itertools.chain(range(5000, 5100), range(3000, 3100)):
        yield f"r10-{s}", random_script(lib, s, calls=10).text
    for s in range(2000, 2040):
        yield f"rdef-{s}", random_script(lib, s).text
    for p in sorted((ROOT / "examples").glob("*.kf")):
        yield f"ex-{p.stem}", p.read_text()


def small_sizes(lib, text: str) -> dict[str, int]:
    prog = parse_script(text, lib)
    matrix = {d for v in prog.values if v.type == "matrix" for d in v.dims}
    return {d.name: (1024 if d.id in matrix else 2**20) for d in prog.dims}


def _hash(obj) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()


def record(text: str, dtype: str, sizes) -> dict:
    c = kfuse.compile(text, dtype=dtype, sizes=sizes, tuned=False, name="s")
    p, search = c.plan, c.search
    ranked = sorted((sorted(k), [(t, i.describe(c.program), i.order) for t, i, _ in v])
                    for k, v in search.ranked.items())
    top = [(q.summary(), q.predicted, [(k.unroll, k.span, k.loop, k.ipb) for k in q.kernels])
           for q in itertools.islice(search.plans(), 20)]
    return {"describe": p.describe(), "json": plan_to_json(p), "predicted": p.predicted, "parts": list(p.parts),
            "cuda": _hash(c.cuda_source), "explain": _hash(search.explain()),
            "partitions": len(search.partitions), "ranked": _hash(ranked), "top": _hash(top)}


def same_plan(r: dict, b: dict, fields=("describe", "json", "cuda")) -> bool:
    close = (len(r["parts"]) == len(b["parts"])
             and all(abs(x - y) <= 1e-9 * abs(y) for x, y in zip([r["predicted"], *r["parts"]],
                                                                  [b["predicted"], *b["parts"]])))
    return close and all(r[f] == b[f] for f in fields)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", help="the record (written, or read with --check)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ignore-cuda", action="store_true",
                    help="compare plans but not the generated source (a change of the prelude or the library's "
                         "text changes every module)")
    args = ap.parse_args()
    lib = load_library()
    out = {}
    for key, text in scripts(lib):
        for dtype in ("float32", "float64"):
            for size in ("default", "small"):
                out[f"{key}/{dtype}/{size}"] = record(text, dtype, None if size == "default" else small_sizes(lib, text))
    if not args.check:
        Path(args.path).write_text(json.dumps(out))
        print(f"recorded {len(out)} plans")
        return
    base = json.loads(Path(args.path).read_text())
    fields = ("describe", "json") if args.ignore_cuda else ("describe", "json", "cuda")
    plans = [k for k in out if not same_plan(out[k], base[k], fields)]
    rest = [k for k in out if any(out[k][f] != base[k][f] for f in ("explain", "partitions", "ranked", "top"))]
    print(f"compared {len(out)} scripts x dtypes x size classes: {len(plans)} first plans differ, "
          f"{len(rest)} differ in explain(), ranked implementations or the 20 plans ranked first")
    for k in plans[:20] + rest[:20]:
        print("  differs:", k)


if __name__ == "__main__":
    main()
