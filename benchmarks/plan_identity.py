"""Plan identity snapshot: the first plan, its CUDA source and its explanation for a fixed set of
scripts, to check that a change to the planner leaves its results unchanged (CPU; no GPU needed).

The cases: the examples (examples/*.kf, also with ``vector_on_strips=True``), 200 random scripts
of the generator's default sizes (2-10 calls: exhaustive search), random scripts of 13-200 calls
(bounded search) and the synthetic shapes of ``plan_scale.py`` (chain, wide, matrix-wide,
alternating) at 20-200 calls; each in float32 and float64.  Per case the snapshot holds the plan
(a SHA-256 digest of ``ir.plan.plan_to_json``, and each kernel's calls), its predicted time, SHA-256 digests of the CUDA source and of
``search.explain()``, and the planning time.

    python benchmarks/plan_identity.py record snapshot.json     # write a snapshot
    python benchmarks/plan_identity.py compare snapshot.json    # plan again, list the differences
    python benchmarks/plan_identity.py --large record large.json   # long scripts (500-2000 calls)

benchmarks/plan_identity.json and plan_identity_large.json are the snapshots taken before the
planning-scale work (issue 44, finding 5).
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANDOM_SEEDS = range(1000, 1200)                    # default sizes: 2-10 calls
# the functions random scripts call: the library's when the snapshots were taken, so that a seed
# gives the same script after functions are added (symv, trmv, vmul)
SNAPSHOT_FUNCTIONS = frozenset({"scal", "axpy", "axpby", "vadd", "dot", "gemv", "gemtv", "ger", "madd"})
BOUNDED = [(seed, n) for n in (13, 20, 30, 50, 80, 120, 200) for seed in (1, 2, 3)]
SHAPES = [(kind, n) for kind in ("chain", "wide", "matrix-wide", "alternating") for n in (20, 50, 100, 200)]
# --large: long scripts (seconds to minutes each before issue 44, finding 5), float32 only
LARGE_RANDOM = [(1, 500), (2, 500), (1, 1000), (2, 1000), (1, 2000)]
LARGE_SHAPES = [("chain", 1000), ("chain", 2000), ("wide", 1000), ("matrix-wide", 500), ("alternating", 1000)]


def _chain(n):
    body = [f"v{i + 1} = axpy(a, v{i}, x);" for i in range(n)]
    return ("scalar a; vector x, " + ", ".join(f"v{i}" for i in range(n + 1)) + "; input a, x, v0;\n"
            + "\n".join(body) + f"\nreturn v{n};")


def _wide(n):
    body = [f"y{i} = axpy(a, x, z);" if i % 2 else f"y{i} = scal(a, x);" for i in range(n)]
    return ("scalar a; vector x, z, " + ", ".join(f"y{i}" for i in range(n)) + "; input a, x, z;\n"
            + "\n".join(body) + "\nreturn " + ", ".join(f"y{i}" for i in range(n)) + ";")


def _mwide(n):
    body = [f"y{i} = gemv(A, x);" if i % 2 else f"y{i} = gemtv(A, x);" for i in range(n)]
    return ("matrix A; vector x, " + ", ".join(f"y{i}" for i in range(n)) + "; input A, x;\n"
            + "\n".join(body) + "\nreturn " + ", ".join(f"y{i}" for i in range(n)) + ";")


def _alternating(n):
    body = [f"v{i + 1} = {'gemv' if i % 2 == 0 else 'gemtv'}(A, v{i});" for i in range(n)]
    return ("matrix A; vector " + ", ".join(f"v{i}" for i in range(n + 1)) + "; input A, v0;\n"
            + "\n".join(body) + f"\nreturn v{n};")


SHAPE_TEXT = {"chain": _chain, "wide": _wide, "matrix-wide": _mwide, "alternating": _alternating}


def cases(large: bool = False) -> list[tuple[str, dict]]:
    """(key, how to make and compile the script) for every case, both dtypes; with ``large``
    only the long scripts."""
    if large:
        return ([(f"random/{seed}x{n}/float32", {"seed": seed, "calls": n, "dtype": "float32"})
                 for seed, n in LARGE_RANDOM]
                + [(f"{kind}/{n}/float32", {"kind": kind, "calls": n, "dtype": "float32"}) for kind, n in LARGE_SHAPES])
    out = []
    for dtype in ("float32", "float64"):
        for path in sorted((ROOT / "examples").glob("*.kf")):
            out.append((f"example/{path.stem}/{dtype}", {"path": str(path), "dtype": dtype}))
            out.append((f"example/{path.stem}/strips/{dtype}", {"path": str(path), "dtype": dtype, "strips": True}))
        for seed in RANDOM_SEEDS:
            out.append((f"random/{seed}/{dtype}", {"seed": seed, "dtype": dtype}))
        for seed, n in BOUNDED:
            out.append((f"random/{seed}x{n}/{dtype}", {"seed": seed, "calls": n, "dtype": dtype}))
        for kind, n in SHAPES:
            out.append((f"{kind}/{n}/{dtype}", {"kind": kind, "calls": n, "dtype": dtype}))
    return out


def run_case(spec: dict) -> dict:
    import kfuse
    from kfuse.frontend.random_scripts import random_script
    from kfuse.ir.plan import plan_to_json
    if "path" in spec:
        text = Path(spec["path"]).read_text()
    elif "kind" in spec:
        text = SHAPE_TEXT[spec["kind"]](spec["calls"])
    else:
        text = random_script(kfuse.load_library(), spec["seed"], calls=spec.get("calls"),
                             functions=SNAPSHOT_FUNCTIONS).text
    t0 = time.perf_counter()
    prog = kfuse.compile(text, dtype=spec["dtype"], tuned=False, vector_on_strips=spec.get("strips", False))
    seconds = time.perf_counter() - t0
    plan = json.dumps(plan_to_json(prog.plan), sort_keys=True)
    return {"plan": hashlib.sha256(plan.encode()).hexdigest(), "predicted": prog.plan.predicted,
            "kernels": [[kc.call.index for kc in k.calls] for k in prog.plan.kernels],
            "cuda": hashlib.sha256(prog.cuda_source.encode()).hexdigest(),
            "explain": hashlib.sha256(prog.search.explain().encode()).hexdigest(),
            "seconds": round(seconds, 3)}


def _run(item):
    key, spec = item
    return key, run_case(spec)


def snapshot(jobs: int, large: bool = False) -> dict:
    todo = cases(large)
    with ProcessPoolExecutor(jobs) as pool:
        return dict(pool.map(_run, todo, chunksize=1 if large else 4))


def compare(old: dict, new: dict) -> list[str]:
    """Lines naming each case whose plan, CUDA or explanation differs."""
    lines = []
    for key in old:
        a, b = old[key], new.get(key)
        if b is None:
            lines.append(f"{key}: missing")
            continue
        what = [f for f in ("plan", "predicted", "cuda", "explain") if a[f] != b[f]]
        if what:
            lines.append(f"{key}: differs in {', '.join(what)}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("record", "compare"))
    ap.add_argument("file")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--large", action="store_true", help="the long scripts only (plan_identity_large.json)")
    args = ap.parse_args(argv)
    # a fresh cache folder: no tuning store, no calibration of this machine (the shipped one ranks)
    os.environ["KFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kfuse-identity-")
    t0 = time.perf_counter()
    new = snapshot(args.jobs, args.large)
    total = time.perf_counter() - t0
    if args.action == "record":
        Path(args.file).write_text(json.dumps(new, sort_keys=True) + "\n")
        print(f"{len(new)} cases recorded in {total:.0f} s")
        return
    old = json.loads(Path(args.file).read_text())
    diffs = compare(old, new)
    slow = sorted(((new[k]["seconds"], old[k]["seconds"], k) for k in old if k in new), reverse=True)[:10]
    for line in diffs:
        print(line)
    print(f"{len(old) - len(diffs)} of {len(old)} cases identical ({total:.0f} s)")
    print("slowest now (now / before):")
    for s_new, s_old, key in slow:
        print(f"  {key}: {s_new:.2f} / {s_old:.2f} s")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
