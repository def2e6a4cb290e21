"""Trust audit (issue 60) of CSR inputs on the CPU: row pointers outside [0, nnz] are a clean error
(finding 7: wrapped differences passed the monotone check and ended in a MemoryError).

The runtime's CuPy calls run on NumPy here (``NumPyCuPy``)."""
from __future__ import annotations

import contextlib
import gc
import io
import re
import subprocess
import sys
import time
import types
import weakref
from pathlib import Path

import numpy as np
import pytest

import kfuse
from kfuse.errors import LaunchError
from kfuse.runtime import args as runtime_args
from kfuse.runtime import csr
from kfuse.runtime.binding import Binding

from test_nvcc import nvcc_compile

ROOT = Path(__file__).resolve().parent.parent
SPARSE_CU = ROOT / "src" / "kfuse" / "blas" / "sparse.cu"
SPARSE_CUH = ROOT / "src" / "kfuse" / "codegen" / "sparse.cuh"
PRELUDE = ROOT / "src" / "kfuse" / "codegen" / "prelude.cuh"


# -- CuPy on NumPy: the calls runtime/csr.py and runtime/args.py make ------------------------------

class _Array(np.ndarray):
    """A NumPy array dressed as a CuPy one: ``.get()``, ``.device.id``, ``.data.ptr``."""

    def get(self):
        return np.asarray(self)

    @property
    def device(self):
        return types.SimpleNamespace(id=0)

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


def _on(x) -> _Array:
    return np.asarray(x).view(_Array)


class _Device:
    def __init__(self, i=0):
        self.id = i

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


NumPyCuPy = types.SimpleNamespace(
    ndarray=_Array, int64=np.int64, uint32=np.uint32, cuda=types.SimpleNamespace(Device=_Device),
    asarray=_on, stack=lambda xs: _on(np.stack([np.asarray(x) for x in xs])), median=np.median,
    nonzero=np.nonzero, zeros=lambda n, dt: _on(np.zeros(n, dt)), empty=lambda n, dt: _on(np.empty(n, dt)))


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(csr, "cupy", lambda: NumPyCuPy)
    monkeypatch.setattr(runtime_args, "cupy", lambda: NumPyCuPy)
    return NumPyCuPy


def matrix(indptr, indices, cols, dtype=np.int64):
    """A kfuse.CSR of stand-in arrays (values 1)."""
    return kfuse.CSR(_on(np.asarray(indptr, dtype)), _on(np.asarray(indices, dtype)),
                     _on(np.ones(len(indices))), (len(indptr) - 1, cols))


# -- finding 7: row pointers outside [0, nnz] ---------------------------------------------------------

@pytest.mark.parametrize("indptr, words", [
    ([0, 2 ** 62, -2 ** 63 + 10, 5], "indptr[2] is -9223372036854775798, outside [0, 5]"),   # differences wrap
    ([0, 9, 3, 3], "indptr[1] is 9, outside [0, 3]"),
    ([0, 2 ** 63 - 1, 4, 4, 4], "indptr[1] is 9223372036854775807, outside [0, 4]"),
])
def test_row_pointers_outside_the_entries_are_a_clean_error(gpu, indptr, words):
    """Issue 60, finding 7: ``[0, 2^62, -2^63 + 10, 5]`` has row lengths 2^62, 2^62 + 10 and
    2^63 - 5 in wrapping int64: it passed the monotone check, and its "long rows" asked NumPy for
    32 PiB (a MemoryError).  Every row pointer must lie in [0, nnz]: a LaunchError naming it."""
    nnz = indptr[-1]
    A = csr.adapt_csr(matrix(indptr, np.arange(nnz) % 3, 3), "A")
    with pytest.raises(LaunchError) as e:
        csr.validate("A", A, 0, np.dtype(np.float64))
    assert str(e.value).startswith("A: malformed CSR: ") and words in str(e.value)


def test_good_row_pointers_still_give_the_row_mapping(gpu):
    lengths = [1] * 63 + [577]                     # one long row: its pieces found
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    got = csr.validate("A", csr.adapt_csr(matrix(indptr, np.arange(640) % 64, 64), "A"), 0, np.dtype(np.float64))
    assert (got.lanes, got.long_row) == (1, 256) and got.long is not None and got.long.grid == 1
    assert got.long.pieces.get().tolist() == [[63, 63, 640, 0, 1]]
