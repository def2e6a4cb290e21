"""One-pass ATAX (a reduction's result used in the kernel that computes it, issue 18) on the GPU
(-m gpu): the planned program against the float64 reference, outputs poisoned with NaN, fresh
random inputs, at odd sizes; a size whose rows do not fit a block takes the two-kernel plan."""
import pytest

import kfuse

from conftest import EXAMPLES
from test_gpu_examples import TOL, run_checked

pytestmark = pytest.mark.gpu
ATAX = next(p for p in EXAMPLES if p.stem == "atax")


def _one_pass(prog) -> bool:
    return len(prog.kernels) == 1 and all(kc.variant.whole for kc in prog.plan.kernels[0].calls)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 31, 33, 1000, 4097, 8192])
def test_atax_one_pass_matches_reference(n, dtype):
    prog = kfuse.compile(ATAX, dtype=dtype, tuned=False, sizes={"n": n})
    assert _one_pass(prog), prog.describe()
    errors = run_checked(prog, n)
    assert all(e < TOL[dtype] for e in errors.values()), errors


@pytest.mark.parametrize("dtype, n", [("float32", 20000), ("float64", 16384)])
def test_atax_rows_too_long_take_two_kernels(n, dtype):
    prog = kfuse.compile(ATAX, dtype=dtype, tuned=False, sizes={"n": n})
    assert len(prog.kernels) == 2, prog.describe()
    errors = run_checked(prog, n)
    assert all(e < TOL[dtype] for e in errors.values()), errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_atax_class_plan_replanned_for_longer_rows(dtype):
    """Planned at n = 4096 (strips of 4096 columns); called at 4097, of the same size class: the
    call path plans again for rows that fit no such strip, and the result is right."""
    prog = kfuse.compile(ATAX, dtype=dtype, tuned=False, sizes={"n": 4096})
    assert _one_pass(prog)
    errors = run_checked(prog, 4097)
    assert all(e < TOL[dtype] for e in errors.values()), errors
    assert prog.for_sizes({0: 4097}).uncovered({0: 4097}) is None
