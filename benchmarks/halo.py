"""A stencil after a stencil or a map: one kernel recomputing the producer across the halo against
two kernels, and the plan kfuse picks (GPU).

Each case is a two-call script (``lap7(lap7(u))``, ``lap7(axpy(a, x, u))``, ...).  "one kernel" is
the fused plan (made where a model without the recompute's latency fuses, and pinned), "two
kernels" every call its own kernel, "kfuse" the plan the default model picks at that size; the
traffic limit is one read of each input and one write of the result over the copy bandwidth
measured in this run.  Times are medians of CUDA-event timings of one call, after warm-up.

    PYTHONPATH=src python benchmarks/halo.py docs/results/halo-H100.md
"""
from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

import kfuse
from kfuse.cost.transfer import Machine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stencils import copy_bandwidth, timed     # noqa: E402 - benchmarks/ is no package

CASES = {   # name: (script, shapes)
    "lap7(lap7)": ("vector u, v, w;\ninput u;\nv = lap7(u);\nw = lap7(v);\nreturn w;\n",
                   [(64,) * 3, (128,) * 3, (256,) * 3]),
    "lap7(axpy)": ("vector x, u, v, w;\nscalar a;\ninput a, x, u;\nv = axpy(a, x, u);\nw = lap7(v);\nreturn w;\n",
                   [(64,) * 3, (128,) * 3, (256,) * 3]),
    "lap7v(lap7)": ("vector c, u, v, w;\ninput c, u;\nv = lap7(u);\nw = lap7v(c, v);\nreturn w;\n",
                    [(128,) * 3, (256,) * 3]),
    "lap5(lap5)": ("vector u, v, w;\ninput u;\nv = lap5(u);\nw = lap5(v);\nreturn w;\n", [(1024, 1024), (4096, 4096)]),
    "lap27v(lap27)": ("vector c, u, v, w;\ninput c, u;\nv = lap27(u);\nw = lap27v(c, v);\nreturn w;\n",
                      [(128,) * 3]),
}


def main(argv=None) -> int:
    import cupy as cp
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="markdown file to write")
    args = ap.parse_args(argv)
    bw = copy_bandwidth(np.float32)
    rows = []
    for dtype in ("float32", "float64"):
        for name, (script, shapes) in CASES.items():
            fused = kfuse.compile(script, dtype=dtype, calibration=Machine(halo_latency=0.0), tuned=False,
                                  sizes={"u.len": 4096})
            assert len(fused.kernels) == 1 and "kf_halo_" in fused.cuda_source, f"{name}: not fused"
            fused = fused.with_plan(fused.plan)
            apart = kfuse.compile(script, dtype=dtype, fuse=False)
            for shape in shapes:
                n = int(np.prod(shape))
                picked = kfuse.compile(script, dtype=dtype, sizes={"u.len": n})
                rng = np.random.default_rng(0)
                ins = {v.name: float(rng.uniform(0.5, 2.0)) if v.type == "scalar" else cp.asarray(
                    rng.uniform(0.5, 2.0, shape) if v.name == "c" else rng.standard_normal(shape), dtype=dtype)
                    for v in fused.program.inputs}
                ref = apart(**ins)
                got = fused(**ins)
                err = float(cp.abs(got - ref).max() / cp.abs(ref).max())
                assert err < (1e-5 if dtype == "float32" else 1e-12), f"{name} {shape}: {err:.1e}"
                t1, t2, tk = (timed(lambda p=p: p(**ins), 30) * 1e6 for p in (fused, apart, picked))
                vectors = sum(1 for v in fused.program.inputs if v.type != "scalar") + 1
                limit = vectors * n * np.dtype(dtype).itemsize / bw * 1e6
                which = "one" if "kf_halo_" in picked.cuda_source else f"{len(picked.kernels)}"
                rows.append(f"| {name} | {dtype} | {'x'.join(map(str, shape))} | {t1:.1f} | {t2:.1f} | {tk:.1f} ({which}) "
                            f"| {t2 / t1:.2f}x | {limit:.1f} |")
                print(rows[-1], flush=True)
    text = [f"# A stencil after a stencil or a map: one kernel against two ({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()})",
            "",
            f"CuPy {cp.__version__}, Python {platform.python_version()}; copy bandwidth {bw / 1e9:.0f} GB/s; medians of 30 "
            "CUDA-event timings of one call; command: `PYTHONPATH=src python benchmarks/halo.py OUT`",
            "",
            "µs per call. \"one kernel\": the producer recomputed across the reader's halo; \"two kernels\": each "
            "call its own; \"kfuse\": the plan the default model picks (in brackets: one kernel, or how many); "
            "\"gain\": two kernels over one; \"limit\": each input read and the result written once over the "
            "copy bandwidth.",
            "",
            "| case | dtype | grid | one kernel | two kernels | kfuse | gain | limit |",
            "|---|---|---|---|---|---|---|---|"] + rows
    with open(args.out, "w") as f:
        f.write("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
