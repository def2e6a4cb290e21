"""Registers of the kernels of first plans (CPU, nvcc; issue 15): how often does a first choice
hold so many registers that fewer threads fit an SM than the model's occupancy (threads and
shared memory only, cost/calibrated.py ``resident_fraction``) assumes?

Plans random scripts of default lengths (seeds A..B) at the given matrix sides in both dtypes,
compiles each first plan's module with nvcc (sm_90, -Xptxas -v) and prints, per kernel whose
register count lowers its resident threads per SM, the threads the model assumed and those the
registers allow.

    PYTHONPATH=src python3 docs/experiments/first_plan_registers.py 2700 2740 8192 2048
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import kfuse
from kfuse.bench.harness import sequence_dims
from kfuse.cost.calibrated import resident_fraction
from kfuse.frontend.random_scripts import random_script
from kfuse.library.loader import load_library
from kfuse.tuning.measure import share_module

REGS_PER_SM, MAX_THREADS = 65536, 2048


def registers(prog) -> dict[str, int]:
    d = Path(tempfile.mkdtemp())
    (d / "m.cu").write_text(share_module([prog], "regs"))
    out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", "-o", str(d / "m.cubin"),
                          str(d / "m.cu")], capture_output=True, text=True, check=True)
    regs, cur = {}, None
    for line in out.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        cur = m.group(1) if m else cur
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            regs[cur] = int(m.group(1))
    return regs


def main(a: int, b: int, sizes: list[int]) -> None:
    lib = load_library()
    kernels = limited = 0
    for seed in range(a, b):
        text = random_script(lib, seed).text
        for n in sizes:
            for dtype in ("float32", "float64"):
                probe = kfuse.compile(text, dtype=dtype, tuned=False, name="s")
                dims = sequence_dims(probe.program, n, n * n)
                c = kfuse.compile(text, dtype=dtype, tuned=False, name="s",
                                  sizes={d.name: dims[d.id] for d in probe.program.dims})
                dev = c.search.model.cal.device
                itemsize = 8 if dtype == "float64" else 4
                regs = registers(c)
                for spec, code in zip(c.plan.kernels, c.kernels):
                    r = next((v for k, v in regs.items() if spec.name in k), None)
                    if r is None:
                        continue
                    kernels += 1
                    L = code.launch
                    assumed = resident_fraction(dev, L.threads, L.smem_bytes_per_real * itemsize) * MAX_THREADS
                    by_regs = (REGS_PER_SM // (max(r, 1) * L.threads)) * L.threads
                    if by_regs < assumed:
                        limited += 1
                        print(f"random{seed} {dtype} n={n} {spec.name}: {r} registers x {L.threads} threads: "
                              f"{by_regs} threads an SM, the model {assumed:.0f}; "
                              f"{', '.join(f'{kc.call.function.name}/{kc.variant.name}' for kc in spec.calls)}", flush=True)
    print(f"{limited} of {kernels} first-plan kernels hold fewer threads an SM by their registers than the model assumes")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), [int(x) for x in sys.argv[3:]])
