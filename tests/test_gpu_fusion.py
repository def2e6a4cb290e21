"""Every implementation of every kernel of every example, run on the GPU (-m gpu)."""
import pytest

import kfuse

from conftest import EXAMPLES
from fusion_util import covering_programs
from test_gpu_examples import TOL, has_matrix, run_checked

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_implementation_is_correct(path, dtype):
    failures = []
    base = kfuse.compile(path, dtype=dtype, tuned=False)
    size = 135 if has_matrix(base) else 5000          # not multiples of 32; 5 tiles: spans of 2 and 4 end partial
    dims = {d.id: size for d in base.program.dims}
    for progs in covering_programs(path, dtype, dims=dims):
        for prog in progs:
            errors = run_checked(prog, size)
            if not all(e < TOL[dtype] for e in errors.values()):
                failures.append((prog.plan.describe(), errors))
    assert not failures, failures[:3]
