"""Row-block partitioning over P ranks, proved on the CPU: every rank's local sub-scripts run by
the float64 reference and the collectives done with NumPy (kfuse.distributed.simulate) must give
the whole script's float64 reference, at odd sizes and every rank count."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

import kfuse
from kfuse.distributed import partition, row_ranges, simulate
from kfuse.errors import KfuseError
from kfuse.frontend import parse_script
from kfuse.frontend.random_scripts import random_script
from kfuse.reference import evaluate, random_inputs, relative_error

from conftest import EXAMPLES
from test_nvcc import nvcc_compile

RANKS = (1, 2, 3, 4, 8)
SIZES = (1, 31, 33, 1000)


def _program(lib, path):
    return parse_script(path.read_text(), lib, str(path))


def _check(lib, prog, P, sizes, row_block=None, seed=0, tol=1e-13):
    """Partition, simulate and compare each output with the whole float64 reference."""
    inputs = random_inputs(prog, sizes, seed)
    ref, mag = evaluate(prog, inputs), evaluate(prog, inputs, magnitude=True)
    part = partition(prog, lib, P, row_block)
    got = simulate(part, inputs, lib)
    assert set(got) == {v.name for v in prog.outputs}
    for v in prog.outputs:
        err = relative_error(got[v.name], ref[v.id], mag[v.id])
        assert err <= tol, f"{prog.name} P={P} sizes={sizes}: {v.name} off by {err:.3g}"
    return part


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("P", RANKS)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_reference(lib, path, P, n):
    prog = _program(lib, path)
    sizes = {d.id: n for d in prog.dims}
    if n < P:                                   # fewer rows than ranks, even in blocks of one row
        with pytest.raises(KfuseError, match=rf"= {n} makes {n} row block\(s\) of 1: fewer than the {P} ranks"):
            _check(lib, prog, P, sizes, row_block=1)
        return
    # default blocks of 32 rows where there are enough of them, else blocks of one row
    row_block = None if math.ceil(n / 32) >= P else 1
    _check(lib, prog, P, sizes, row_block)


def test_too_few_row_blocks_refused_clearly(lib):
    prog = _program(lib, next(p for p in EXAMPLES if p.stem == "gemver"))
    with pytest.raises(KfuseError, match=r"n = 33 makes 2 row block\(s\) of 32: fewer than the 4 ranks"):
        _check(lib, prog, 4, {d.id: 33 for d in prog.dims})


def test_rectangular_bicgk(lib):
    """Rows and columns are different sizes: only the rows are split."""
    prog = _program(lib, next(p for p in EXAMPLES if p.stem == "bicgk"))
    rows, cols = prog.inputs[0].dims
    for P in RANKS:
        part = _check(lib, prog, P, {rows: 45, cols: 70}, row_block=5)
        assert {p.name: p.layout for p in part.inputs} == {"A": "split", "p": "rep", "r": "split"}


@pytest.mark.parametrize("n,P,rb", [(1000, 8, 32), (1000, 3, 32), (31, 8, 1), (33, 2, 32), (7, 7, 1), (100, 3, 7)])
def test_row_ranges_are_balanced_blocks(n, P, rb):
    ranges = row_ranges(n, P, rb)
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))          # contiguous, in rank order
    assert all(start % rb == 0 and stop > start for start, stop in ranges)
    blocks = [math.ceil((stop - start) / rb) for start, stop in ranges]
    assert max(blocks) - min(blocks) <= 1


def test_plans_of_the_examples(lib):
    """Collectives only where the data flow needs them, segments as large as it allows."""
    def plan(stem):
        part = partition(_program(lib, next(p for p in EXAMPLES if p.stem == stem)), lib, 4)
        return [(s.op, s.names) if hasattr(s, "op") else "local" for s in part.segments], part

    segs, part = plan("bicgk")              # q = A p split, s = A^T r partial: one kernel group
    assert segs == ["local", ("all_reduce", ("s",))]
    assert {p.name: p.layout for p in part.outputs} == {"q": "split", "s": "rep"}
    segs, part = plan("gemver")             # x = b B^T y + z: the partial sum reduced, z added once
    assert segs == ["local", ("all_reduce", ("x_part",)), "local"]
    assert "x_part = gemtv(b, B, y);" in part.locals[0].text and "x = axpy(1.0, z, x_part);" in part.locals[1].text
    assert plan("gesummv")[0] == ["local"]
    assert plan("atax")[0] == ["local", ("all_reduce", ("y",))]
    assert plan("axpydot")[0] == ["local", ("all_reduce", ("r",))]
    assert plan("vadd")[0] == ["local"]


def test_all_gather_and_slice(lib):
    """A split result read whole (gemv after gemv) is all-gathered; a replicated one read as rows
    (ger after an all-reduced gemtv) is sliced."""
    text = ("matrix A[n, n]; vector x[n], t[n], w[n], s[n], g[n]; matrix B[n, n];\n"
            "input A, x, g;\nt = gemv(A, x);\nw = gemv(A, t);\ns = gemtv(A, w);\nB = ger(A, s, g);\n"
            "return w, B;")
    prog = parse_script(text, lib)
    for P in (1, 2, 5):
        part = _check(lib, prog, P, {d.id: 53 for d in prog.dims}, row_block=4, seed=P)
    ops = [s.op for s in part.segments if hasattr(s, "op")]
    assert ops == ["all_gather", "all_reduce", "slice"]
    assert len(part.locals) == 3


def _row_blockable(lib):
    """The functions whose calls split by row blocks: all but those on a triangle (symv, trmv),
    which the partition refuses (test_symmetric.py)."""
    return frozenset(f.name for f in lib.functions if not f.triangle)


@pytest.mark.parametrize("P", (2, 3, 8))
def test_random_scripts_match_reference(lib, P):
    refused = []
    for seed in range(40):
        prog = parse_script(random_script(lib, seed, functions=_row_blockable(lib)).text, lib)
        try:
            _check(lib, prog, P, {d.id: 37 for d in prog.dims}, row_block=4, seed=seed, tol=1e-12)
        except KfuseError as e:
            refused.append((seed, str(e)))
    assert refused == []


def test_unpartitionable_call_refused(lib):
    """gemtv with a term along the columns needs the overload without it to add the term once."""
    prog = _program(lib, next(p for p in EXAMPLES if p.stem == "sgemvt"))
    no_short = SimpleNamespace(tile=lib.tile, overloads=lambda name: tuple(
        f for f in lib.overloads(name) if name != "gemtv" or len(f.inputs) == 5))
    with pytest.raises(KfuseError, match=r"line \d+: gemtv: reduces over the split rows and adds y"):
        partition(prog, no_short, 2)


def test_inconsistent_sizes_refused(lib):
    prog = _program(lib, next(p for p in EXAMPLES if p.stem == "gesummv"))
    inputs = random_inputs(prog, {d.id: 40 for d in prog.dims}, 1)
    inputs["x"] = np.ones(41)
    with pytest.raises(KfuseError, match="size n is 41 here and 40"):
        simulate(partition(prog, lib, 2), inputs, lib)


@pytest.mark.parametrize("stem", ["bicgk", "gemver", "axpydot"])
def test_local_segments_compile(nvcc, tmp_path, stem):
    """Every local segment plans, fuses and generates CUDA that nvcc accepts."""
    lib = kfuse.load_library()
    part = partition(_program(lib, next(p for p in EXAMPLES if p.stem == stem)), lib, 4)
    for k, seg in enumerate(part.locals):
        compiled = kfuse.compile(seg.text, dtype="float32", device_scalars=seg.scalar_inputs, calibration=False)
        assert {v.name for v in compiled.program.outputs} == set(seg.outputs)
        nvcc_compile(nvcc, compiled.cuda_source, tmp_path, f"{stem}{k}")
    if stem == "bicgk":                          # both products in one kernel, as on one GPU
        assert len(kfuse.compile(part.locals[0].text, calibration=False).plan.kernels) == 1


def test_local_segments_of_random_scripts_plan(lib):
    """Every local sub-script of 40 random scripts over 3 ranks parses, plans and generates CUDA."""
    count = 0
    for seed in range(40):
        part = partition(parse_script(random_script(lib, seed, functions=_row_blockable(lib)).text, lib), lib, 3)
        for seg in part.locals:
            compiled = kfuse.compile(seg.text, library=lib, device_scalars=seg.scalar_inputs, calibration=False)
            assert compiled.kernels and {v.name for v in compiled.program.outputs} == set(seg.outputs)
            count += 1
    assert count >= 40


def test_names_made_for_local_scripts_never_clash(lib):
    """The partial sum of x is named apart from a script value x_part; sizes apart from values."""
    text = ("scalar b; matrix A[n, n]; vector y[n], z[n], x[n], x_part[n], n_blk[n];\n"
            "input b, A, y, z;\nx = gemtv(b, A, y, 1, z);\nx_part = gemv(A, x);\nn_blk = vadd(x_part, y);\n"
            "return x, n_blk;")
    prog = parse_script(text, lib)
    part = _check(lib, prog, 3, {d.id: 40 for d in prog.dims}, row_block=4)
    assert "x_part2 = gemtv(b, A, y);" in part.locals[0].text
    assert "n_blk2" in part.locals[0].text
