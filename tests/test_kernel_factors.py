"""The calibration's kernel factors (issue 58): functions no micro-kernel stands for -- a sparse
mat-vec, the stencils -- timed whole (calibration/kernels.py), kept in a calibration entry
(checked when read), priced by the calibrated model without the 'no measurement' notice, and
carried to a new library only where the function's source did not change.  CPU: the measuring
itself is tests/test_gpu_calibration.py's."""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest

import kfuse
from kfuse.calibration import kernels
from kfuse.calibration.measure import carry_over
from kfuse.cost import calibrated
from kfuse.cost.calibrated import CalibratedModel, factor_at
from kfuse.cost.store import Calibration, kernel_factor_key, read_file, source_digest, write_entry
from kfuse.cost.transfer import DEFAULT_MACHINE
from kfuse.cost.transfer import kernel_time as transfer_kernel_time
from kfuse.errors import CalibrationError
from kfuse.ir.program import Value, entries_of

SPMV = "csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n"
LAP7 = "vector u, v;\ninput u;\nv = lap7(u);\nreturn v;\n"


def _shipped(dtype="float32") -> Calibration:
    return next(c for c in read_file(calibrated.SHIPPED / "H100.json") if c.dtype == dtype)


def _with_factors(lib, cal: Calibration, points=((2.0, 4.0), (16.0, 2.0), (128.0, 1.2))) -> Calibration:
    factors = {}
    for fn in kernels.targets(lib):
        for var in fn.variants:
            by = "entries" if fn.grid else "mean_row"
            factors[kernel_factor_key(fn, var)] = {"by": by, "source": source_digest(lib, var),
                                                   "points": ((1e6, 1.5),) if fn.grid else tuple(points)}
    return replace(cal, kernels=factors)


def _notices(fn):
    seen: list[str] = []
    calibrated._noticed.clear()
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())    # type: ignore[method-assign]
    logging.getLogger("kfuse").addHandler(handler)
    try:
        out = fn()
    finally:
        logging.getLogger("kfuse").removeHandler(handler)
    return out, [m for m in seen if "no measurement" in m]


def test_targets_are_the_sparse_and_stencil_functions_and_their_scripts_plan(lib):
    names = {fn.name for fn in kernels.targets(lib)}
    assert {"spmv", "lap5", "lap7", "lap27", "lap5v", "lap7v", "lap27v"} <= names
    assert not names & {"gemv", "axpy", "dot", "symv"}
    for fn in kernels.targets(lib):
        prog = kfuse.compile(kernels.script(fn), fuse=False, tuned=False, calibration=False)
        assert [kc.call.function.name for k in prog.kernels for kc in k.spec.calls] == [fn.name]


def test_a_factor_is_time_over_the_bytes_at_the_copy_bandwidth():
    moved = 3 * 10**9
    ideal_us = moved / DEFAULT_MACHINE.bandwidth * 1e6
    assert kernels.factor(ideal_us * 2 + 5.0, 5.0, moved) == pytest.approx(2.0)
    assert kernels.factor(1.0, 5.0, moved) == 0.01          # never zero or negative


@pytest.mark.parametrize("rows, mean", [(1000, 2), (4099, 9), (5000, 64)])
def test_the_band_pattern_is_a_valid_matrix_of_its_mean(rows, mean):
    indptr, indices = kernels.band_pattern(rows, mean, seed=rows)
    assert indptr.dtype == indices.dtype == np.int32 and indptr[0] == 0 and indptr[-1] == len(indices)
    lengths = np.diff(indptr)
    assert lengths.min() >= 1 and abs(lengths.mean() - mean) < 0.2 * mean + 0.5
    for r in range(0, rows, 97):
        cols = indices[indptr[r]:indptr[r + 1]]
        assert np.all(np.diff(cols) > 0) and cols.min() >= max(0, r - kernels.BAND) and cols.max() < rows
        assert cols.max() <= r + kernels.BAND


def test_factors_round_trip_and_bad_ones_are_refused(lib, tmp_path):
    cal = _with_factors(lib, _shipped())
    write_entry(tmp_path / "cal.json", cal)
    [back] = read_file(tmp_path / "cal.json")
    assert back.kernels == cal.kernels and back.kernels
    key = next(iter(cal.kernels))
    for bad in ({"by": "rows", "source": "0" * 12, "points": [[2.0, 1.0]]},
                {"by": "mean_row", "source": "0" * 12, "points": [[16.0, 1.0], [2.0, 1.0]]},
                {"by": "mean_row", "source": "0" * 12, "points": [[2.0, 0.0]]},
                {"by": "mean_row", "source": "0" * 12, "points": []},
                {"by": "mean_row", "source": "xyz", "points": [[2.0, 1.0]]},
                {"by": "mean_row", "source": "0" * 12, "points": [[2.0, float("nan")]]}):
        rec = replace(cal, kernels={key: bad}).to_json()
        with pytest.raises(CalibrationError):
            Calibration.from_json(rec)


def test_interpolation_is_log_linear_and_clamped():
    pts = ((2.0, 4.0), (8.0, 2.0), (32.0, 1.0))
    assert factor_at(pts, 1.0) == 4.0 and factor_at(pts, 100.0) == 1.0
    assert factor_at(pts, 4.0) == pytest.approx(3.0) and factor_at(pts, 16.0) == pytest.approx(1.5)


@pytest.mark.parametrize("script", [SPMV, LAP7])
def test_a_factored_kernel_has_no_notice_and_takes_its_factor(lib, script):
    prog, seen = _notices(lambda: kfuse.compile(script, calibration=CalibratedModel(_shipped()), tuned=False))
    assert seen == []                               # the shipped calibration has the factor
    plain = replace(_shipped(), kernels={})
    prog, seen = _notices(lambda: kfuse.compile(script, calibration=CalibratedModel(plain), tuned=False))
    assert seen                                     # without it: the notice
    model = CalibratedModel(_with_factors(lib, plain))
    prog, seen = _notices(lambda: kfuse.compile(script, calibration=model, tuned=False))
    assert seen == []
    [code] = prog.kernels
    call = code.spec.calls[0].call
    dims = {d.id: 4096 for d in prog.program.dims}
    csr = next((v for v in prog.program.values if v.type == "csr"), None)
    if csr is not None:
        dims[csr.dims[2]] = 4096 * 16              # 16 a row: factor 2
    entries = entries_of(prog.program, dims)
    base = transfer_kernel_time(code, dims, entries, 4)
    moved = sum(entries[v.id] for v in [a for a in call.args if isinstance(a, Value)] + list(call.outputs)) * 4
    f = 2.0 if csr is not None else 1.5
    assert model.kernel_time(code, dims, entries, 4) == pytest.approx(base + (f - 1) * moved / DEFAULT_MACHINE.bandwidth)


def test_carry_over_keeps_the_factors_of_unchanged_sources(lib):
    cal = _with_factors(lib, _shipped())
    assert carry_over(cal, lib).kernels == cal.kernels
    stale = replace(cal, kernels={k: dict(v, source="0" * 12) for k, v in cal.kernels.items()})
    assert carry_over(stale, lib).kernels == {}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_shipped_calibration_covers_the_shipped_library(lib, dtype):
    """Every routine of the shipped library has its micro-kernel measured in the shipped H100
    calibration, and every function timed whole its kernel factor of today's source: no shipped
    function is priced by the transfer model (issue 58, item 4).  A library change that alters a
    micro-kernel or a timed function's source fails here until ``kfuse calibrate`` measures it."""
    from kfuse.calibration.probes import library_probes
    cal = _shipped(dtype)
    assert cal.library == lib.digest
    routines, probes = library_probes(lib)
    assert set(probes) <= set(cal.probes), sorted(set(probes) - set(cal.probes))[:5]
    assert cal.routines == routines
    for fn in kernels.targets(lib):
        for var in fn.variants:
            factor = cal.kernels.get(kernel_factor_key(fn, var))
            assert factor is not None and factor["source"] == source_digest(lib, var), kernel_factor_key(fn, var)
