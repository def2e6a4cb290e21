"""What do the clears of a small step cost?  CG's step (examples/solvers/cg.py) runs 4 kernels,
and before them one or two `kf_fill` launches zero the scalars its dot products add into (the
returned block and the per-stream block of temporaries). This times the solver's loop (each
step's results fed to the next, CUDA events around ITERS steps, per step) as kfuse runs it and with
the fills cut out of the launches (the dot products then add onto the previous step's sums: the
numbers are wrong, the work and its order the same), in fresh processes taking turns.

    PYTHONPATH=src python3 docs/experiments/step_fills.py [--sizes 1024 4096] [--rounds 3] [--against OLD/src]

``--against SRC`` adds the loop as another kfuse source tree runs it (``git archive`` of a commit).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _child(n: int, dtype: str, iters: int, nofill: bool) -> None:
    import cupy as cp
    sys.path.insert(0, str(ROOT / "examples" / "solvers"))
    import cg
    from kfuse.runtime import binding as bd
    if nofill:
        orig = bd.Binding._prepare

        def prepare(self):
            orig(self)
            self.launches = [(la, p) for la, p in self.launches if la.name != "kf_fill"]
            if self.launches:                         # nothing before the first kernel now
                first = self.launches[0][0]
                first.dependent, first._cfg.numAttrs = False, 0
            self.patches = [p for _, ps in self.launches for p in ps]
        bd.Binding._prepare = prepare
    rs = cp.random.RandomState(0)
    A = rs.standard_normal((n, n)).astype(dtype) / n ** 0.5
    A = A @ A.T + cp.eye(n, dtype=dtype)
    b = rs.standard_normal(n).astype(dtype)
    x = cp.zeros_like(b)
    r, rr = cg.cg_start(A, b, x)
    p = r
    for _ in range(20):
        x, r, p, rr = cg.cg_step(A, x, r, p, rr)
    s, e = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for _ in range(5):
        cp.cuda.Device().synchronize()
        s.record()
        for _ in range(iters):
            x, r, p, rr = cg.cg_step(A, x, r, p, rr)
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) * 1e3 / iters)
    print(json.dumps({"us": statistics.median(out)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", metavar="SRC", action="append", default=[],
                    help="another kfuse source tree, timed beside (repeatable; the first is the baseline)")
    ap.add_argument("--child", nargs=4, metavar=("N", "DTYPE", "ITERS", "NOFILL"))
    a = ap.parse_args()
    if a.child:
        _child(int(a.child[0]), a.child[1], int(a.child[2]), a.child[3] == "1")
        return
    own = os.environ.get("PYTHONPATH", "src")
    variants = ([(f"tree {k + 1}", src, "0") for k, src in enumerate(a.against)]
                + [("as run", own, "0"), ("fills cut", own, "1")])
    print("CG step per iteration (us, GPU time of the loop; median of rounds, each the median of 5 loops)", flush=True)
    for dtype in a.dtypes:
        for n in a.sizes:
            got: dict[str, list[float]] = {label: [] for label, _, _ in variants}
            for _ in range(a.rounds):
                for label, src, nofill in variants:
                    done = subprocess.run([sys.executable, __file__, "--child", str(n), dtype, str(a.iters), nofill],
                                          env=dict(os.environ, PYTHONPATH=src), check=True, capture_output=True,
                                          text=True)
                    got[label].append(json.loads(done.stdout.splitlines()[-1])["us"])
            med = {label: statistics.median(v) for label, v in got.items()}
            base = med[variants[0][0]]
            print(f"{dtype} n = {n:5d}: " + ", ".join(f"{label} {m:7.2f} ({m / base:.3f}x)" for label, m in med.items())
                  + "; rounds " + " / ".join(str([round(v, 2) for v in got[label]]) for label in got), flush=True)

if __name__ == "__main__":
    main()
