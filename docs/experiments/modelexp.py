import sys; sys.path.insert(0,'examples/solvers'); sys.path.insert(0,'benchmarks')
import numpy as np, kfuse, os
from kfuse.cost import store
import loops as B
L, C = float(os.environ.get('LNS', '0') or 0), float(os.environ.get('CNS', '0') or 0)
if L:
    import dataclasses, kfuse.cost.calibrated as cc
    _init = cc.CalibratedModel.__init__
    def init(self, cal):
        _init(self, cal)
        self.launch_seconds = L * 1e-9
        self.cal = dataclasses.replace(cal, clear_ns=C)
    cc.CalibratedModel.__init__ = init
for n in (1024, 4096):
  for dt in ('float32','float64'):
    for m in ('cg','bicg','bicgstab','power','lsq'):
        st = B.problem(m, n, dt, lambda v, d: np.asarray(v, dtype=d))
        row = []
        for strips in (False, True):
            f = kfuse.jit(B.METHODS[m][0], vector_on_strips=strips)
            c = f.compile(*st).for_sizes({d.id: n for d in f.compile(*st).program.dims})
            ex = c.describe()
            line = [l for l in ex.splitlines() if l.startswith('plan for')][0]
            row.append(line.split(': ',1)[1])
        print(m, n, dt, ' | '.join(row), flush=True)
