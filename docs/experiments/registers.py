"""Registers that nvcc gives the implementations of a one-kernel script, beside the register
entries the layout counts (CPU, nvcc; issue 15).  The model's occupancy counts threads and shared
memory only (cost/calibrated.py ``resident_fraction``): this shows how far the layout's entries
(x unroll x span, two registers per float64 entry) are from what the compiler allocates.

    PYTHONPATH=src python3 docs/experiments/registers.py gemv+gemtv float32 8192 40
    (scripts: loop_span.py's SCRIPTS; the model's first LIMIT implementations)
"""
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import kfuse
from kfuse.tuning.measure import share_module

sys.path.insert(0, str(Path(__file__).parent))
from loop_span import SCRIPTS  # noqa: E402


def entries(code) -> int:
    """Register entries of the elements in registers, every unrolled and spanned copy counted."""
    return sum(code.placement.registers.values()) * code.spec.unroll * code.spec.span


def main(name: str, dtype: str, n: int, limit: int) -> None:
    text = SCRIPTS[name]
    probe = kfuse.compile(text, tuned=False)
    base = kfuse.compile(text, dtype=dtype, tuned=False, sizes={d.name: n for d in probe.program.dims})
    s = base.search
    block = frozenset(range(len(base.program.calls)))
    progs = []
    for k in range(min(limit, len(s.ranked[block]))):
        plan = s.plan((block,), (k,))
        progs.append(base.with_plan(replace(plan, kernels=tuple(replace(kk, name=f"{kk.name}_s{k}")
                                                                   for kk in plan.kernels))))
    d = Path(tempfile.mkdtemp())
    (d / "m.cu").write_text(share_module(progs, "registers"))
    out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", "-o", str(d / "m.cubin"),
                          str(d / "m.cu")], capture_output=True, text=True, check=True)
    cur = None
    for line in out.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and cur and "_s" in cur:
            k = int(cur.rsplit("_s", 1)[1])
            _, impl, code = s.ranked[block][k]
            est = entries(code) * (2 if dtype == "float64" else 1)
            print(f"{name} {dtype} #{k:3d} registers {m.group(1):>4s} entries {est:4d} threads {code.launch.threads:4d} "
                  f"{impl.describe(base.program)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
