"""How many registers does nvcc give a fused kernel, against what the layout knows before any
compile (its register entries per thread, with unrolled and spanned copies, times the words of
an entry)?  The calibrated model takes a kernel's occupancy from its threads and shared memory
only; a kernel of many register entries (float64 MADD with 8 x 4-entry quads per thread and
matrix: 164 registers, 32-thread blocks, 12 resident per SM, not 32) runs at a fraction of it.

For the first K plans of random scripts (seeds given) and the examples, in both dtypes at the
model's default sizes: every distinct kernel's register entries and nvcc's registers
(`nvcc -arch=sm_90 -cubin -Xptxas -v`), and a least-squares line through them.

    PYTHONPATH=src python3 docs/experiments/register_fit.py [K] [SEED0] [COUNT] > register-fit-cpu.txt
"""
import itertools
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

import kfuse
from kfuse.codegen.layout import layout
from kfuse.codegen.module import module_source
from kfuse.frontend.random_scripts import random_script
from kfuse.library.loader import load_library

ROOT = Path(__file__).resolve().parents[2]


def entries(spec, lib) -> int:
    """Register entries per thread of a kernel with its copies (codegen/copies.py)."""
    lay = layout(spec, lib)
    U, V = spec.unroll, spec.span
    sums = [0, 0, 0, 0]
    for key, n in lay.placement.registers.items():
        sums[(0 if key in lay.outside else 2) + (1 if key in lay.per_slot else 0)] += n
    a, b, c, d = sums
    return a + V * b + U * (c + V * d)


def registers(source: str) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "m.cu"
        cu.write_text(source)
        proc = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", "-o",
                               str(Path(tmp) / "m.cubin"), str(cu)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out, name = {}, None
    for line in proc.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            out[name] = int(m.group(1))
            name = None
    return out


def rows_of(text: str, dtype: str, top: int, lib) -> list[tuple]:
    c = kfuse.compile(text, dtype=dtype, tuned=False, name="s")
    plans = list(itertools.islice(c.search.plans(), top))
    kernels = {}
    for n, plan in enumerate(plans):
        for k in plan.kernels:
            kernels[f"{k.name}_t{n}"] = replace(k, name=f"{k.name}_t{n}")
    progs = [c.with_plan(replace(pl, kernels=tuple(replace(k, name=f"{k.name}_t{n}") for k in pl.kernels)))
             for n, pl in enumerate(plans)]
    codes = {k.launch.kernel: k for p in progs for k in p.kernels}
    regs = registers(module_source(list(codes.values()), c.library, dtype, title="register fit"))
    word = 2 if dtype == "float64" else 1
    return [(dtype, name, entries(k.spec, lib), word, k.launch.threads, regs[name], k.spec.nesting)
            for name, k in codes.items() if name in regs]


def main() -> None:
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    seed0 = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    lib = load_library()
    texts = [random_script(lib, s).text for s in range(seed0, seed0 + count)]
    texts += [p.read_text() for p in sorted((ROOT / "examples").glob("*.kf"))]
    jobs = [(t, dt) for t in texts for dt in ("float32", "float64")]
    with ThreadPoolExecutor(2) as pool:
        rows = [r for rs in pool.map(lambda j: rows_of(j[0], j[1], top, lib), jobs) for r in rs]
    print("dtype    entries words threads registers nesting kernel")
    for r in sorted(rows, key=lambda r: (r[0], r[2] * r[3], r[5])):
        print(f"{r[0]:8s} {r[2]:7d} {r[2] * r[3]:5d} {r[4]:7d} {r[5]:9d} {r[6]:7d} {r[1]}")
    x = np.array([r[2] * r[3] for r in rows], float)
    y = np.array([r[5] for r in rows], float)
    for nest in (1, 2):
        sel = np.array([r[6] == nest for r in rows])
        if sel.sum() > 2:
            a, b = np.polyfit(x[sel], y[sel], 1)
            resid = y[sel] - (a * x[sel] + b)
            print(f"nesting {nest}: registers ~ {a:.2f} x words + {b:.1f} ({sel.sum()} kernels, "
                  f"residual sd {resid.std():.1f}, max {np.abs(resid).max():.1f})")


if __name__ == "__main__":
    main()
