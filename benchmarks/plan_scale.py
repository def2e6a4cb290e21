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

CASE = r'''
import json, resource, sys, time
import kfuse
from kfuse.frontend.random_scripts import random_script
kind, n, seed, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def chain(n):
    body = [f"v{i + 1} = axpy(a, v{i}, x);" for i in range(n)]
    return ("scalar a; vector x, " + ", ".join(f"v{i}" for i in range(n + 1)) + "; input a, x, v0;\n"
            + "\n".join(body) + f"\nreturn v{n};")
def wide(n):
    body = [f"y{i} = axpy(a, x, z);" if i % 2 else f"y{i} = scal(a, x);" for i in range(n)]
    return ("scalar a; vector x, z, " + ", ".join(f"y{i}" for i in range(n)) + "; input a, x, z;\n"
            + "\n".join(body) + "\nreturn " + ", ".join(f"y{i}" for i in range(n)) + ";")
def mwide(n):
    body = [f"y{i} = gemv(A, x);" if i % 2 else f"y{i} = gemtv(A, x);" for i in range(n)]
    return ("matrix A; vector x, " + ", ".join(f"y{i}" for i in range(n)) + "; input A, x;\n"
            + "\n".join(body) + "\nreturn " + ", ".join(f"y{i}" for i in range(n)) + ";")
def alternating(n):
    body = [f"v{i + 1} = {'gemv' if i % 2 == 0 else 'gemtv'}(A, v{i});" for i in range(n)]
    return ("matrix A; vector " + ", ".join(f"v{i}" for i in range(n + 1)) + "; input A, v0;\n"
            + "\n".join(body) + f"\nreturn v{n};")
lib = kfuse.load_library()
src = {"chain": chain, "wide": wide, "matrix-wide": mwide, "alternating": alternating}.get(kind)
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
                out = subprocess.run([sys.executable, "-c", CASE, kind, str(n), "1", args.model], capture_output=True,
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
