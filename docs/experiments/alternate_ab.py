"""A/B of single cold-L2 calls: the tree before calls alternated the mirrored order (a copy of its
src/ at OLD, e.g. `mkdir -p .ab/old && git archive 742c617 src | tar -x -C .ab/old`, left untracked so
that the device tool carries it) against this tree with alternation (new) and with
KFUSE_ALTERNATE=0 (new-alt0).  Each is `kfuse run --json` (bound call, median of 60, L2 flushed
before each call), three rounds in turns.

    PYTHONPATH=src python3 docs/experiments/alternate_ab.py [OLD]
"""
import json
import os
import subprocess
import sys

SEQS = [("bicgk", 8192, "float32"), ("sscal", 2**26, "float64"), ("waxpby", 2**26, "float64"),
        ("sscal", 2**24, "float64")]


def main():
    old = sys.argv[1] if len(sys.argv) > 1 else ".ab/old/src"
    res = {}
    for _ in range(3):
        for tree, path, alt in (("old", old, "1"), ("new", "src", "1"), ("new-alt0", "src", "0")):
            env = dict(os.environ, PYTHONPATH=path, KFUSE_ALTERNATE=alt)
            for s, n, dt in SEQS:
                out = subprocess.run([sys.executable, "-m", "kfuse", "-q", "run", f"examples/{s}.kf", "--dtype", dt,
                                      "--size", str(n), "--reps", "60", "--seed", "1", "--json"],
                                     env=env, capture_output=True, text=True)
                if out.returncode:
                    print(tree, s, dt, "FAILED", out.stderr[-500:])
                    continue
                res.setdefault((s, n, dt, tree), []).append(json.loads(out.stdout)["time_us"])
    for k, ts in sorted(res.items()):
        print(*k, ts)


if __name__ == "__main__":
    main()
