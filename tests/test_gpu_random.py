"""Random scripts, long scripts and horizontally fused plans on the GPU against the float64 NumPy
reference, both dtypes, at sizes that are not multiples of 32 (run with -m gpu)."""
import numpy as np
import pytest

import kfuse
from kfuse.frontend import parse_script
from kfuse.frontend.random_scripts import random_script
from kfuse.reference import evaluate, random_inputs

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


def _in_range(rs, lib, dtype) -> bool:
    """Do the script's values stay far inside the dtype's range at the test size?  (Long chains
    of rank-1 updates and products can overflow float32; such a seed checks nothing.)"""
    program = parse_script(rs.text, lib)
    dims = {d.id: _size(rs) for d in program.dims}
    with np.errstate(over="ignore"):       # an overflowing seed is what this looks for: it reads inf
        mags = evaluate(program, random_inputs(program, dims, 0), magnitude=True)
        return max(float(np.max(np.abs(m))) for m in mags.values()) < np.finfo(dtype).max / 1e6


def _long_scripts(lib, dtype, count=2, calls=40):
    """The first ``count`` long random scripts from seed 7 on whose values fit the dtype."""
    out, seed = [], 7
    while len(out) < count:
        rs = random_script(lib, seed, calls=calls)
        if _in_range(rs, lib, dtype):
            out.append(rs)
        seed += 1
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_long_random_scripts_match_reference(lib, dtype):
    for rs in _long_scripts(lib, dtype):
        prog = kfuse.compile(rs.text, dtype=dtype, tuned=False)
        assert prog.search.space.bounded is not None
        _check(prog, _size(rs), rs.seed)


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
