# The first CSR row-mapping rule tried (issue 58): entries over lane-steps (efficiency) per matrix,
# beside the ratio lanes / stream of the H100 sweep (sweep-lanes-float64-H100.md). CPU only.
import sys, numpy as np
sys.path.insert(0,'benchmarks')
from matrices import matrix_set
sys.path.insert(0,'src')
from kfuse.runtime.csr import mapping
sweep = {'fe3d_27':(147.2,333.7,211.1,169.7),'fe2d_q2':(102.5,142.3,117.0,97.9),'powerlaw_laplacian':(149.9,736.5,469.0,333.5),
'circuit':(65.8,89.5,75.6,70.2),'block_diagonal':(243.5,742.8,444.5,297.7),'banded':(191.7,468.0,289.4,233.6),'diagonal':(44.5,35.2,38.5,41.6),'random_uniform':(126.5,206.5,184.0,153.8)}
for m in matrix_set(10**6):
    d = np.diff(m.indptr).astype(np.int64)
    rows=len(d); nnz=int(d.sum()); med=float(np.median(d))
    lanes,long_row = mapping(rows,nnz,int(d.max()),med)
    dd = d.copy()
    if long_row: dd[dd>long_row]=0
    out=[]
    for L in (1,2,4,8):
        g=32//L
        pad=(-rows)%g
        x=np.concatenate([-(-dd//L), np.zeros(pad,np.int64)]).reshape(-1,g)
        work=x.max(1).sum()*32
        out.append(nnz/work)
    s=sweep[m.name]
    print(f"{m.name:20s} mean {nnz/rows:5.1f} med {med:4.1f} chosen {lanes} eff1/2/4/8 "+" ".join(f"{e:.2f}" for e in out), " ratio L/stream", " ".join(f"{v/s[0]:.2f}" for v in s[1:]))
