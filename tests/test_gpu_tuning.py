"""Empirical search on the GPU picks a correct plan and the store is reused (-m gpu)."""
import pytest

import kfuse
from kfuse.ir.plan import plan_to_json
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
    script, sizes = ROOT / "examples" / "bicgk.kf", {"A.rows": 1000, "A.cols": 1000}
    again = kfuse.compile(script, sizes=sizes, tuned=path)
    assert plan_to_json(again.plan) == plan_to_json(best.plan)          # the whole plan, macros included
    # the winner may be the ranking's own first plan: a store naming another plan must be obeyed too
    default = plan_to_json(kfuse.compile(script, sizes=sizes, tuned=False).plan)
    other = next(p for p in again.search.plans() if plan_to_json(p) != default)
    TuningStore(path).append(rec["key"], other, rec["time_us"])
    assert plan_to_json(kfuse.compile(script, sizes=sizes, tuned=path).plan) == plan_to_json(other)
