"""Planning time and peak memory against script length (CPU; no GPU needed): chains of vector
updates, independent vector calls on shared inputs, matrix calls on shared inputs, alternating
gemv/gemtv, and random scripts of the generator (frontend/random_scripts.py).  Each case runs in
its own process (peak memory is the process's), ``--runs`` times: the planning time is the median
of the first ``kfuse.compile`` of a fresh process (what a user sees), "warm" that of a second
compile of the same script in the same process.

    python benchmarks/plan_scale.py [--calls 10,20,50,100] [--limit 120] [--model calibrated|transfer]
    python benchmarks/plan_scale.py --kinds random --calls 1000 --functions snapshot --runs 5
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASE = r'''
import json, resource, sys, time
import kfuse
from kfuse.frontend.random_scripts import random_script
kind, n, seed, model, functions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[6]
sys.path.insert(0, sys.argv[5])      # this folder: the shapes are plan_identity.SHAPE_TEXT
from plan_identity import SHAPE_TEXT, SNAPSHOT_FUNCTIONS
lib = kfuse.load_library()
src = SHAPE_TEXT.get(kind)
text = src(n) if src else random_script(lib, seed, calls=n,
                                        functions=SNAPSHOT_FUNCTIONS if functions == "snapshot" else None).text
seconds = []
for _ in range(2):
    t0 = time.perf_counter()
    prog = kfuse.compile(text, calibration=(model == "calibrated"), tuned=False)
    seconds.append(time.perf_counter() - t0)
print(json.dumps({"kind": kind, "calls": n, "seconds": round(seconds[0], 3), "warm": round(seconds[1], 3),
                  "kernels": len(prog.kernels),
                  "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  "bounded": prog.search.space.bounded is not None}))
'''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", default="10,20,50,100")
    ap.add_argument("--kinds", default="chain,wide,matrix-wide,alternating,random")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds per case before it is stopped")
    ap.add_argument("--model", choices=("calibrated", "transfer"), default="calibrated",
                    help="ranking model: the calibrated one users get (default), or the transfer model")
    ap.add_argument("--functions", choices=("library", "snapshot"), default="library",
                    help="what random scripts call: the library's functions (default), or those of the "
                         "plan identity snapshots (plan_identity.SNAPSHOT_FUNCTIONS)")
    ap.add_argument("--runs", type=int, default=1, help="fresh processes per case (the median is shown)")
    args = ap.parse_args(argv)
    print(f"{'script':12s} {'calls':>5s} {'plan s':>8s} {'warm s':>8s} {'peak MB':>8s} {'kernels':>7s}  search")
    for kind in args.kinds.split(","):
        for n in (int(x) for x in args.calls.split(",")):
            runs = []
            for _ in range(args.runs):
                try:
                    out = subprocess.run([sys.executable, "-c", CASE, kind, str(n), "1", args.model, str(HERE),
                                          args.functions], capture_output=True, text=True, timeout=args.limit)
                except subprocess.TimeoutExpired:
                    print(f"{kind:12s} {n:5d} {'>' + str(int(args.limit)):>8s}")
                    break
                if out.returncode != 0:
                    print(f"{kind:12s} {n:5d}  failed: {out.stderr.strip().splitlines()[-1][:100]}")
                    break
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            else:
                r = runs[-1]
                first = statistics.median(x["seconds"] for x in runs)
                warm = statistics.median(x["warm"] for x in runs)
                print(f"{kind:12s} {n:5d} {first:8.2f} {warm:8.2f} {max(x['peak_mb'] for x in runs):8d} "
                      f"{r['kernels']:7d}  {'bounded' if r['bounded'] else 'exhaustive'}", flush=True)


if __name__ == "__main__":
    main()
