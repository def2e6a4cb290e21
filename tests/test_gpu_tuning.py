"""Empirical search on the GPU picks a correct plan and the store is reused (-m gpu)."""
import pytest

import kfuse
from kfuse.tuning.store import TuningStore

from conftest import ROOT
from test_gpu_examples import run_checked

pytestmark = pytest.mark.gpu


def test_tune_then_compile_uses_the_winner(tmp_path):
    path = tmp_path / "store.jsonl"
    prog = kfuse.compile(ROOT / "examples" / "bicgk.kf", tuned=False)
    best = prog.tune(top=6, sizes={"A.rows": 1000, "A.cols": 1000}, reps=10, store=path)
    errors = run_checked(best, 1000)
    assert all(e < 1e-5 for e in errors.values()), errors
    rec = TuningStore(path).lookup(next(iter([r["key"] for r in TuningStore(path).records()])))
    assert rec is not None and 1 <= rec["rank"] <= 6
    again = kfuse.compile(ROOT / "examples" / "bicgk.kf", sizes={"A.rows": 1000, "A.cols": 1000}, tuned=path)
    assert [(k.loop, k.unroll, tuple(kc.variant.name for kc in k.calls)) for k in again.plan.kernels] == \
           [(k.loop, k.unroll, tuple(kc.variant.name for kc in k.calls)) for k in best.plan.kernels]
