"""Same-address contention of the row atomics in a kernel whose loop walks i (BiCGK's q): the
blocks of one i-chunk all start at its first row, so at any moment they add to the same 32
entries.  Modes, each on the model's top plans (cold L2, median of CUDA events):
  generated     as kfuse builds it
  order2        blocks numbered along the loop (KFUSE_ORDER=2): running blocks are in different chunks
  rotG          each block starts its chunk at iteration (blk_j / G) * 5 % iters and wraps around
                (edit of the generated loop in the candidates' shared module text before it is
                compiled, CompiledScript.share_source; results checked against the reference)

    python docs/experiments/rotate_explore.py [--top K] SEQ ...
"""
import argparse
import os
import re

from explore_util import candidates, max_error, top_plans

from kfuse.runtime.gpu import cupy
from kfuse.runtime.timing import median_us


def rotate(source: str, G: int) -> str:
    source = source.replace("        if (first_i + it >= n_i) break;   // the whole block is past the end\n", "")
    source = re.sub(r"ix_u(\d+)(_v\d+)?\.i = first_i \+ it \+ (\d+);",
                    lambda m: f"ix_u{m[1]}{m[2] or ''}.i = first_i + (it + {m[3]} + kf_rot) % iters;", source)
    source = re.sub(r"(    KfIx ix\{lt, 0, first_i, blk_j\};\n)",
                    lambda m: m[1] + f"    const int kf_rot = (int)((blk_j / {G}) * 5 % iters);\n", source)
    return source


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seqs", nargs="+")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--modes", default="generated,order2,rot1,rot4,rot16")
    a = ap.parse_args()
    cp = cupy()
    for seq in a.seqs:
        for mode in a.modes.split(","):
            G = int(mode[3:]) if mode.startswith("rot") else None
            os.environ["KFUSE_ORDER"] = "2" if mode == "order2" else ""
            c, dims, plans = top_plans(seq, a.top)
            cands, case = candidates(c, plans, dims, f"{seq} {mode}",
                                     edit=(lambda s, G=G: rotate(s, G)) if G else None)
            cells = []
            for x in cands:
                err = max_error(x, case)
                t = median_us(x.bind(**case[0]), reps=a.reps, cold_l2=True)
                cells.append(f"{t:6.1f}" + ("" if err < 1e-5 else "!"))
            print(f"{seq:8s} {mode:10s} " + " ".join(cells), flush=True)
            cp.get_default_memory_pool().free_all_blocks()
    os.environ["KFUSE_ORDER"] = ""


if __name__ == "__main__":
    main()
