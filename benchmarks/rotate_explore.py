"""Same-address contention of the row atomics in a kernel whose loop walks i (BiCGK's q): the
blocks of one i-chunk all start at its first row, so at any moment they add to the same 32
entries.  Modes, each on the model's top plans (cold L2, median of CUDA events):
  generated     as kfuse builds it
  order2        blocks numbered along the loop (KFUSE_ORDER=2): running blocks are in different chunks
  rotG          each block starts its chunk at iteration (blk_j / G) * 5 % iters and wraps around
                (source edit of the generated loop; results checked against the reference)

    python benchmarks/rotate_explore.py [--top K] SEQ ...
"""
import argparse
import os
import re
from dataclasses import replace
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
import kfuse.runtime.compiler as compiler
from kfuse.api import share_module
from kfuse.reference import device_case, evaluate, relative_error
from kfuse.runtime.timing import median_us
from kfuse.tuning_run import search_dims

ROOT = Path(__file__).resolve().parent.parent


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
    original = compiler.load_module
    for seq in a.seqs:
        for mode in a.modes.split(","):
            G = int(mode[3:]) if mode.startswith("rot") else None
            compiler.load_module = (lambda s, G=G: original(rotate(s, G))) if G else original
            os.environ["KFUSE_ORDER"] = "2" if mode == "order2" else ""
            c = kfuse.compile(ROOT / "examples" / f"{seq}.kf", tuned=False)
            p = c.program
            dims = search_dims(c, {d.name: 8192 for d in p.dims})
            plans = [pl for _, pl in zip(range(a.top), c.search.plans())]
            cands = [c.with_plan(replace(pl, kernels=tuple(replace(k, name=f"{k.name}_t{n}") for k in pl.kernels)))
                     for n, pl in enumerate(plans)]
            share_module(cands, f"{seq} {mode}", dims)
            dev, host, outs = device_case(p, dims, "float32", 0)
            ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
            cells = []
            for x in cands:
                for o in outs.values():
                    o.fill(np.nan)
                got = x(out=outs, sync=True, **dev)
                got = got if isinstance(got, tuple) else (got,)
                err = max(relative_error(cp.asnumpy(g), ref[v.id], mag[v.id]) for v, g in zip(p.outputs, got))
                t = median_us(x.bind(**dev), reps=a.reps, cold_l2=True)
                cells.append(f"{t:6.1f}" + ("" if err < 1e-5 else "!"))
            print(f"{seq:8s} {mode:10s} " + " ".join(cells), flush=True)
            cp.get_default_memory_pool().free_all_blocks()
    compiler.load_module = original
    os.environ["KFUSE_ORDER"] = ""


if __name__ == "__main__":
    main()
