# The CSR row-mapping data of issue 58: per matrix of benchmarks/matrices.py (10^6 rows) and the
# calibration bands, the lane-steps a warp of groups of lanes takes per row, against a streamed
# row's entries plus 4 (the rule of runtime/csr.mapping). CPU only.
import sys, numpy as np
sys.path.insert(0,'benchmarks'); sys.path.insert(0,'src')
from matrices import matrix_set
from kfuse.calibration.kernels import band_pattern
from kfuse.runtime import csr
mats=[(m.name, m.row_lengths()) for m in matrix_set(10**6)]
for mean in (2,4,8): mats.append((f"band{mean}", np.diff(band_pattern(10**6, mean, mean)[0]).astype(np.int64)))
for name,d in mats:
    *slots, kept = (int(v) for v in csr.lane_slots(d, np))
    rows=len(d); med=float(np.median(d)); typ=min(d.mean(), med)
    L=max(1, 2**round(np.log2(max(typ,1.0))))
    print(f"{name:20s} typical {typ:5.1f} L {L} slots/row " + " ".join(f"{s/rows:5.2f}" for s in slots) + f"  stream(K=4) {(kept+4*rows)/rows:5.2f}")
