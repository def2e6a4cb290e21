"""Measure an SM's time per block of an empty kernel (calibration's ``block_ns``) and write a
copy of a calibration file with it (for trying the block term before a full `kfuse calibrate`).

    PYTHONPATH=src python3 docs/experiments/block_cost.py SRC.json OUT.json
"""
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

from kfuse.calibration.measure import block_ns
from kfuse.calibration.probes import EMPTY_KERNEL
from kfuse.cost.store import Calibration

src, out = Path(sys.argv[1]), Path(sys.argv[2])
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
rows = []
for dtype, ctype in (("float32", "float"), ("float64", "double")):
    empty = cp.RawKernel(f"typedef {ctype} real;\n{EMPTY_KERNEL}", "kfc_empty")
    sink = cp.zeros(1, dtype=np.dtype(dtype))
    for threads in (64, 128, 256, 1024):
        rows.append((dtype, threads, block_ns(cp, empty, sink, sms, threads)))
        print(f"{dtype} {threads:5d} threads per block: {rows[-1][2]:.1f} ns per block and SM")
per_block = {dt: ns for dt, t, ns in rows if t == 64}
data = json.loads(src.read_text())
entries = []
for rec in data["entries"]:
    cal = Calibration.from_json(rec)
    cal.block_ns = round(per_block[cal.dtype], 1)
    entries.append(cal.to_json())
out.write_text(json.dumps({**data, "entries": entries}, indent=1, sort_keys=True))
print("wrote", out)
