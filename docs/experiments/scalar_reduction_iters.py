"""GPU time of plans with a reduction to a scalar at small and large N against the serial
iterations per block (fewer, longer blocks mean fewer atomic adds into the one result).
Run: PYTHONPATH=src python3 docs/experiments/scalar_reduction_iters.py"""
from dataclasses import replace

import kfuse
from kfuse.bench.harness import sequence_dims
from kfuse.reference import device_case
from kfuse.runtime.timing import median_us

SCRIPTS = {"axpydot": "examples/axpydot.kf",
           "dot": "vector x, y; scalar r; input x, y; r = dot(x, y); return r;",
           "nrm-like": "vector x, y, z; scalar r, s; input x, y, z; r = dot(x, y); s = dot(y, z); return r, s;"}
for dtype in ("float32", "float64"):
    for name, src in SCRIPTS.items():
        for N in (2**20, 2**26):
            shape = kfuse.compile(src, dtype=dtype, tuned=False).program
            dims = sequence_dims(shape, 1024, N)
            prog = kfuse.compile(src, dtype=dtype, sizes={d.name: dims[d.id] for d in shape.dims})
            dev, host, outs = device_case(prog.program, dims, dtype, 0)
            row = []
            for it in (0, 1, 2, 4, 8, 16, 32, 64, 128, 256):
                plan = replace(prog.plan, kernels=tuple(replace(k, iters=it) for k in prog.plan.kernels))
                p2 = prog.with_plan(plan)
                b = p2.bind(**dev)
                row.append(f"{it or 'auto'}:{median_us(b, reps=50, warmup=5):.1f}")
            grid = [k.launch for k in prog.kernels]
            print(f"{dtype} {name:9s} N=2^{N.bit_length() - 1}: " + " ".join(row), flush=True)
