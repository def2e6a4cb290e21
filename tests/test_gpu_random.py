"""Random scripts, long scripts and horizontally fused plans on the GPU against the float64 NumPy
reference, both dtypes, at sizes that are not multiples of 32 (run with -m gpu)."""
import pytest

import kfuse
from kfuse.frontend.random_scripts import random_script

from test_gpu_examples import run_checked
from test_scale import INDEPENDENT, SMALL

pytestmark = pytest.mark.gpu
TOL = {"float32": 1e-5, "float64": 1e-12}
SEEDS = range(2000, 2016)          # chosen before looking at any result


def _check(prog, size, seed):
    errors = run_checked(prog, size, seed=seed)
    if not all(e < TOL[prog.dtype] for e in errors.values()):
        pytest.fail(f"relative errors above {TOL[prog.dtype]:g}: {errors}\n{prog.plan.describe()}")


def _size(rs):
    return 97 if rs.matrix else 1000


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", SEEDS)
def test_random_script_matches_reference(lib, seed, dtype):
    rs = random_script(lib, seed)
    prog = kfuse.compile(rs.text, dtype=dtype, tuned=False)
    _check(prog, _size(rs), seed)
    small = prog.for_sizes({d.id: d.literal or 33 for d in prog.program.dims})
    _check(small, 33, seed + 1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", [7, 8])
def test_long_random_script_matches_reference(lib, seed, dtype):
    rs = random_script(lib, seed, calls=40)
    prog = kfuse.compile(rs.text, dtype=dtype, tuned=False)
    assert prog.search.space.bounded is not None
    _check(prog, _size(rs), seed)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_horizontally_fused_plan_matches_reference(dtype):
    prog = kfuse.compile(INDEPENDENT, dtype=dtype, tuned=False, sizes=SMALL)
    assert any(len(k.calls) == 2 for k in prog.plan.kernels)
    for size in (1, 1000, 1500, 4097):
        _check(prog, size, size)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_horizontal_merges_of_random_scripts_match_reference(lib, dtype):
    """Scripts whose plan changed with horizontal fusion (it merged kernels) are still right."""
    checked = 0
    for seed in range(1000, 1050):
        rs = random_script(lib, seed)
        prog = kfuse.compile(rs.text, dtype=dtype, tuned=False)
        apart = kfuse.compile(rs.text, dtype=dtype, tuned=False, horizontal=False)
        if len(prog.plan.kernels) < len(apart.plan.kernels):
            _check(prog, _size(rs), seed)
            checked += 1
        if checked == 4:
            break
    assert checked >= 3
