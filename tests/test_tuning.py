"""Tuning store: format, plan round trip, crash and concurrency safety, foreign stores (CPU)."""
import json
import multiprocessing

import pytest

import kfuse
from kfuse.codegen.kernel import build_kernel
from kfuse.errors import KfuseError
from kfuse.tuning.store import HEADER, TuningStore, size_words, store_key
from kfuse.ir.plan import plan_from_json, plan_to_json

from conftest import ROOT


@pytest.fixture(scope="module")
def gemver():
    return kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)


def key(prog, gpu="NVIDIA H100 80GB HBM3"):
    return store_key(prog.program, gpu, prog.dtype, prog.search.dims)


def test_plan_round_trip(gemver):
    plan = list(__import__("itertools").islice(gemver.search.plans(), 7))[-1]
    back = plan_from_json(gemver.program, json.loads(json.dumps(plan_to_json(plan))))
    assert [(k.name, k.loop, k.unroll, k.ipb, k.stores) for k in back.kernels] == \
           [(k.name, k.loop, k.unroll, k.ipb, k.stores) for k in plan.kernels]
    assert [[(kc.call.index, kc.variant.name, kc.macros) for kc in k.calls] for k in back.kernels] == \
           [[(kc.call.index, kc.variant.name, kc.macros) for kc in k.calls] for k in plan.kernels]
    for k in back.kernels:
        build_kernel(k, gemver.library)


def test_a_kernel_of_many_calls_round_trips():
    """Five synthesized functions fused: the planner's kernel name (a name per call) was 79
    characters, over the 64 that ``plan_problem`` takes, so the plan's JSON form was refused -- a
    tuned winner ignored, a ``with_plan`` plan read by address (``for_device_scalars``) failed.
    Names are kept to 64 characters, those that do not fit counted."""
    prog = kfuse.compile("scalar a;\nvector x, y, z, w, u, t;\ninput a, x;\ny = exp(x);\nz = sin(y) * a;\n"
                         "w = cos(z);\nu = tanh(w);\nt = log(u);\nreturn t;\n", tuned=False, calibration=False)
    (name,) = [k.name for k in prog.plan.kernels]
    assert len(name) <= 64 and name.startswith("k0_map_") and name.endswith("_and2more"), name
    back = plan_from_json(prog.program, plan_to_json(prog.plan))
    assert [k.name for k in back.kernels] == [name]
    prog.with_plan(prog.plan).for_device_scalars(["a"])


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d[0]["calls"].pop(), "cover every call"),
    (lambda d: d[0]["calls"][0].update(variant="nope"), "does not fit"),
    (lambda d: d[0]["calls"][0].update(call=99), "does not fit"),
])
def test_foreign_plans_are_refused(gemver, mutate, match):
    data = plan_to_json(gemver.plan)
    mutate(data)
    with pytest.raises(KfuseError, match=match):
        plan_from_json(gemver.program, data)


def test_size_class_rounds_to_powers_of_two(gemver):
    d = gemver.program.dims[0]
    assert size_words(gemver.program, {d.id: 8000}) == size_words(gemver.program, {d.id: 8192}) == "n=2^13"


def test_append_and_lookup_newest(tmp_path, gemver):
    store = TuningStore(tmp_path / "t.jsonl")
    assert store.lookup(key(gemver)) is None
    store.append(key(gemver), gemver.plan, 300.0)
    store.append(key(gemver), gemver.plan, 290.0)
    store.append(key(gemver, "other GPU"), gemver.plan, 1.0)
    assert store.lookup(key(gemver))["time_us"] == 290.0
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == HEADER and len([x for x in lines if x]) == 4


def test_torn_and_corrupt_records_are_skipped(tmp_path, gemver):
    warnings = []
    store = TuningStore(tmp_path / "t.jsonl", warn=warnings.append)
    store.append(key(gemver), gemver.plan, 300.0)
    good = (tmp_path / "t.jsonl").read_text()
    record = [x for x in good.splitlines() if x][1]
    tampered = json.loads(record)
    tampered["time_us"] = 1.0                                 # content no longer matches its hash
    with open(tmp_path / "t.jsonl", "a") as f:
        f.write(json.dumps(tampered) + "\n")
        f.write(record[:57])                                  # a crash mid-write: torn last line
    assert store.lookup(key(gemver))["time_us"] == 300.0
    assert len(warnings) == 2 and all("skipped" in w for w in warnings)
    store.append(key(gemver), gemver.plan, 280.0)            # appending after a torn line still works
    assert store.lookup(key(gemver))["time_us"] == 280.0


def test_foreign_store_is_ignored_and_not_written(tmp_path, gemver):
    path = tmp_path / "t.jsonl"
    path.write_text('{"something": "else"}\n')
    warnings = []
    store = TuningStore(path, warn=warnings.append)
    assert store.records() == [] and "not a kfuse tuning store" in warnings[0]
    with pytest.raises(KfuseError, match="refusing to write"):
        store.append(key(gemver), gemver.plan, 1.0)
    assert path.read_text() == '{"something": "else"}\n'


_start = None


def _init(barrier):
    global _start
    _start = barrier


def _writer(args):
    path, n = args
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)
    store = TuningStore(path)
    _start.wait(timeout=120)            # all writers start together: they race on creating the file
    for i in range(n):
        store.append(store_key(prog.program, f"gpu{i % 3}", "float32", prog.search.dims), prog.plan, float(i))
    return n


def test_concurrent_writers(tmp_path):
    path = str(tmp_path / "t.jsonl")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4, initializer=_init, initargs=(ctx.Barrier(4),)) as pool:
        assert sum(pool.map(_writer, [(path, 25)] * 4)) == 100
    warnings = []
    records = TuningStore(path, warn=warnings.append).records()
    assert len(records) == 100 and not warnings
    assert open(path).read().count('"format": "kfuse-tuning-store"') == 1


def test_compile_ignores_store_without_gpu(tmp_path, monkeypatch, gemver):
    import kfuse.runtime.gpu as gpu
    gpu_model = "NVIDIA H100 80GB HBM3"
    other = next(p for p in gemver.search.plans() if p.kernels != gemver.plan.kernels)
    path = tmp_path / "t.jsonl"
    TuningStore(path).append(key(gemver, gpu_model), other, 1.0)
    script = ROOT / "examples" / "gemver.kf"
    monkeypatch.setattr(gpu, "gpu_name", lambda: gpu_model)
    used = kfuse.compile(script, tuned=path)
    assert used.plan.kernels == other.kernels and used.from_store            # the store is used...
    monkeypatch.setattr(gpu, "gpu_name", lambda: None)
    untuned = kfuse.compile(script, tuned=False)
    prog = kfuse.compile(script, tuned=path)                                 # ...but not without a GPU
    assert prog.plan.kernels == untuned.plan.kernels != other.kernels and not prog.from_store
