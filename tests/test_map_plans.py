"""Map kernels (nothing carried across a serial loop) and plans given by hand: what the plan space
holds for them and which plan a call runs (CPU)."""
from pathlib import Path

import pytest

import kfuse
from kfuse.fusion.prune import Prune
from kfuse.ir.plan import plan_to_json
from kfuse.tuning import search

ROOT = Path(__file__).resolve().parents[1]
MAPS = ["sscal", "vadd", "waxpby", "madd"]


def _implementations(prog):
    s = prog.search
    return [(impl, code) for ranked in s.ranked.values() for _, impl, code in ranked]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", MAPS)
def test_a_map_kernel_is_never_unrolled(name, dtype):
    """One instance per slot: unrolled copies would never run, only hold registers."""
    prog = kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dtype, tuned=False)
    found = _implementations(prog)
    maps = [(impl, code) for impl, code in found if not code.launch.carried]
    assert maps, "the example has map kernels"
    assert all(impl.unroll == 1 for impl, _ in maps)
    assert any(impl.unroll > 1 for impl, code in _implementations(
        kfuse.compile(ROOT / "examples" / "axpydot.kf", dtype=dtype, tuned=False)) if code.launch.carried)
    assert prog.search.space.pruned, "the pruned implementations are counted for --explain"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["vadd", "waxpby"])
def test_a_map_with_a_plain_implementation_exchanges_nothing(name, dtype):
    """Fused maps whose calls could take different mappings (quad beside warp) keep only the
    implementations that pass nothing through shared memory."""
    prog = kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dtype, tuned=False)
    fused = [(impl, code) for impl, code in _implementations(prog) if len(impl.calls) > 1]
    assert fused
    assert all(code.barriers == 0 and code.launch.smem_bytes_per_real == 0 for _, code in fused)
    assert len({impl.variants for impl, _ in fused}) >= 2, "both uniform mappings remain"
    reasons = {k for calls, p in prog.search.space.pruned.items() for k, v in p.items() if v}
    assert Prune.BETWEEN_MAPPINGS in reasons
    assert str(Prune.BETWEEN_MAPPINGS) == "exchanging between mappings (one without exists)"


@pytest.mark.parametrize("dtype, n", [("float64", 4096), ("float64", 1024), ("float32", 8192)])
def test_a_kernel_with_an_exchange_free_implementation_keeps_only_those(dtype, n):
    """Not only maps: GEMVER's first kernel (two gers and a gemtv) fuses with one mapping (rows,
    colsum), so no implementation passing B between quad and rows mappings is kept (float64
    n = 4096: 215 us with the exchange against 144 without, H100)."""
    from kfuse.fusion.space import _between_mappings
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf", dtype=dtype, tuned=False, sizes={"n": n})
    found = [(impl, code) for impl, code in _implementations(prog) if len(impl.calls) == 3]
    assert found and not any(_between_mappings(code) for _, code in found)
    assert not any(_between_mappings(k) for k in prog.kernels)


def test_a_plan_given_by_hand_runs_at_every_size():
    """with_plan pins the plan: a call at another size class must not swap in the model's choice
    (the empirical search and experiments time the plan they built)."""
    prog = kfuse.compile(ROOT / "examples" / "waxpby.kf", tuned=False)
    plans = list(prog.search.plans())
    other = prog.with_plan(plans[3])
    dims = {d.id: 2**26 for d in prog.program.dims}
    assert other.for_sizes(dims) is other
    replanned = prog.for_sizes(dims)
    assert replanned is not prog and replanned.search.dims == dims


def test_a_plan_of_another_program_is_checked():
    """gemver.with_plan(sscal.plan) compiled sscal's kernel as gemver's program, in silence
    (describe() said "plan for sscal"); with_plan(None) was an AttributeError from codegen."""
    gemver = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)
    sscal = kfuse.compile(ROOT / "examples" / "sscal.kf", tuned=False)
    with pytest.raises(kfuse.KfuseError, match=r"the plan is one of sscal \(calls scal\), not of gemver "
                                               r"\(calls ger, ger, gemtv, gemv\)"):
        gemver.with_plan(sscal.plan)
    for bad in (None, "plan", plan_to_json(gemver.plan)):
        with pytest.raises(kfuse.KfuseError, match="with_plan takes a plan"):
            gemver.with_plan(bad)
    # the same calls in a program compiled apart (script text, not the file): checked, then taken
    text = kfuse.compile((ROOT / "examples" / "gemver.kf").read_text(), fuse=False)
    assert plan_to_json(text.with_plan(gemver.plan).plan) == plan_to_json(gemver.plan)
    waxpby = kfuse.compile(ROOT / "examples" / "waxpby.kf", tuned=False)
    other = kfuse.compile(ROOT / "examples" / "waxpby.kf", tuned=False, sizes={"N": 1000})
    assert other.with_plan(waxpby.plan).kernels == waxpby.kernels


def test_tune_at_another_size_class_searches_that_class(monkeypatch):
    """kfuse tune --size N=2^26 on a script compiled at 2^24 measures the plans ranked at 2^26."""
    prog = kfuse.compile(ROOT / "examples" / "waxpby.kf", tuned=False)
    seen = {}

    def fake_measure(compiled, plans, dims, reps=30, log=None, label="tune"):
        seen["dims"], seen["search_dims"] = dims, compiled.search.dims
        seen["plans"] = plans
        return [(10.0 + n, n, compiled.with_plan(p)) for n, p in enumerate(plans)], 0.0
    monkeypatch.setattr(search, "measure_plans", fake_measure)
    best = search.tune(prog, top=3, sizes={"N": 2**26}, store=False, iterations=False)
    assert seen["dims"] == seen["search_dims"] == {d.id: 2**26 for d in prog.program.dims}
    at_class = prog.for_sizes(seen["dims"])
    assert [p.describe() for p in seen["plans"]] == [p.describe() for p in list(at_class.search.plans())[:3]]
    assert best.pinned and best.for_sizes(seen["dims"]) is best


def test_a_narrow_variant_beside_wider_calls_is_priced_at_its_own_threads(monkeypatch):
    """A `quad` call (8 threads per instance) fused with `warp` calls (32) runs its loads and stores
    with a quarter of the kernel's threads: the calibrated model looks its probes up at a quarter
    of the kernel's occupancy; the `warp` call's at the kernel's own.  (Such kernels are pruned
    where an exchange-free implementation exists, as here: kept for this test.)"""
    from kfuse.cost.calibrated import CalibratedModel
    from kfuse.fusion import space
    monkeypatch.setattr(space, "_between_mappings", lambda code: False)
    prog = kfuse.compile(ROOT / "examples" / "axpydot.kf", tuned=False)
    model = prog.search.model
    if not isinstance(model, CalibratedModel):
        pytest.fail("the shipped calibration should rank this script")
    mixed = next(code for ranked in prog.search.ranked.values() for _, impl, code in ranked
                 if {kc.variant.name for kc in code.spec.calls} == {"quad", "warp"} and code.spec.ipb == 8)
    seen = []
    real = CalibratedModel.routine_ns

    def spy(self, pid, loop, unroll, ipb, resident):
        seen.append(resident)
        return real(self, pid, loop, unroll, ipb, resident)
    monkeypatch.setattr(CalibratedModel, "routine_ns", spy)
    model._parts.clear()        # kernel_parts is kept by content: this kernel's was found in ranking
    model.kernel_parts(mixed, prog.search.dims, 4)
    by_variant = {}
    steps = [s for s in mixed.steps if s.routine is not None]
    assert len(seen) == len(steps)
    for s, resident in zip(steps, seen):
        if s.routine.kind in ("load", "store"):
            by_variant.setdefault(s.kc.variant.name, set()).add(resident)
    assert len(by_variant["quad"]) == len(by_variant["warp"]) == 1
    assert by_variant["quad"].pop() == pytest.approx(by_variant["warp"].pop() / 4)


def test_a_plan_given_by_hand_is_kept_with_device_scalars():
    """A pinned program bound to 0-d device scalars runs its own plan, the scalars read by address."""
    prog = kfuse.compile(ROOT / "examples" / "waxpby.kf", tuned=False)
    plans = list(prog.search.plans())
    pinned = prog.with_plan(plans[5])
    assert pinned.plan.describe() != prog.plan.describe()
    dev = pinned.for_device_scalars({"a"})
    assert dev.pinned and dev.program.device_scalars() == frozenset({"a"})
    assert plan_to_json(dev.plan) == plan_to_json(pinned.plan)
    assert dev.for_sizes({d.id: 2**26 for d in dev.program.dims}) is dev
    assert dev.cuda_source != pinned.cuda_source, "a is read by address"
    assert plan_to_json(prog.for_device_scalars({"a"}).plan) == plan_to_json(prog.plan)
