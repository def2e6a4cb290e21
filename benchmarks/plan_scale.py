"""Planning time and peak memory against script length (CPU; no GPU needed): chains of vector
updates, independent vector calls on shared inputs, matrix calls on shared inputs, alternating
gemv/gemtv, and random scripts of the generator (frontend/random_scripts.py).  Each case runs in
its own process (peak memory is the process's).

    python benchmarks/plan_scale.py [--calls 10,20,50,100] [--limit 120] [--model calibrated|transfer]
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASE = r'''
import json, resource, sys, time
import kfuse
from kfuse.frontend.random_scripts import random_script
kind, n, seed, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, sys.argv[5])      # this folder: the shapes are plan_identity.SHAPE_TEXT
from plan_identity import SHAPE_TEXT
lib = kfuse.load_library()
src = SHAPE_TEXT.get(kind)
text = src(n) if src else random_script(lib, seed, calls=n).text
t0 = time.perf_counter()
prog = kfuse.compile(text, calibration=(model == "calibrated"), tuned=False)
dt = time.perf_counter() - t0
print(json.dumps({"kind": kind, "calls": n, "seconds": round(dt, 3), "kernels": len(prog.kernels),
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
    args = ap.parse_args(argv)
    print(f"{'script':12s} {'calls':>5s} {'plan s':>8s} {'peak MB':>8s} {'kernels':>7s}  search")
    for kind in args.kinds.split(","):
        for n in (int(x) for x in args.calls.split(",")):
            try:
                out = subprocess.run([sys.executable, "-c", CASE, kind, str(n), "1", args.model, str(HERE)], capture_output=True,
                                     text=True, timeout=args.limit)
            except subprocess.TimeoutExpired:
                print(f"{kind:12s} {n:5d} {'>' + str(int(args.limit)):>8s}")
                continue
            if out.returncode != 0:
                print(f"{kind:12s} {n:5d}  failed: {out.stderr.strip().splitlines()[-1][:100]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{kind:12s} {n:5d} {r['seconds']:8.2f} {r['peak_mb']:8d} {r['kernels']:7d}  "
                  f"{'bounded' if r['bounded'] else 'exhaustive'}", flush=True)


if __name__ == "__main__":
    main()
