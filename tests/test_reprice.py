"""``kfuse report --reprice``: a report's measured plans priced again on the CPU (bench/reprice.py).

The report here is made as ``kfuse report`` makes one (``SequenceResult.to_json``), with times
invented in place of the GPU's: repricing with the model that ranked the plans gives back their
predictions, an alternative's launch term moves each plan by its kernel count, the choice among
the measured plans is set against the measured best, and files that are not such a report are
refused with a message."""
import itertools
import json

import pytest

import kfuse
from conftest import ROOT
from kfuse.bench import reprice
from kfuse.bench.prediction import SequenceResult, alternative_model, priced_unfused, sampled, spread
from kfuse.cli.main import main
from kfuse.errors import KfuseError
from kfuse.ir.plan import plan_to_json

BICGK = ROOT / "examples" / "bicgk.kf"
GEMVER = ROOT / "examples" / "gemver.kf"


def _report(paths, dtype="float32", n=1024, top=6, best=3) -> dict:
    """A report's JSON for the top plans of each script at n, measured times invented: plan
    ``best`` the fastest (80 % of its prediction), the others at their predictions."""
    seqs = []
    for path in paths:
        text = path.read_text()
        probe = kfuse.compile(text, dtype=dtype, tuned=False)
        sizes = {d.name: n for d in probe.program.dims}
        search = kfuse.compile(text, dtype=dtype, sizes=sizes, tuned=False).search
        plans = list(itertools.islice(search.plans(), top))
        res = SequenceResult(path.stem, search.count_plans(), search.count_implementations(), script=text, sizes=sizes)
        res.measured = [(k + 1, p.predicted * 1e6, p.predicted * 1e6 * (0.8 if k + 1 == best else 1.0))
                        for k, p in enumerate(plans)]
        res.summaries = [p.summary() for p in plans]
        res.plan_jsons = {k + 1: plan_to_json(p) for k, p in enumerate(plans)}
        seqs.append(res.to_json())
    return {"header": {"gpu": "test", "dtype": dtype, "model": "m"}, "sequences": seqs}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_repricing_with_the_ranking_model_gives_back_its_predictions(dtype):
    data = _report([BICGK, GEMVER], dtype)
    rows, name = reprice.reprice(json.loads(json.dumps(data)))      # through JSON, as from a file
    assert "calibrated model" in name and [r.name for r in rows] == ["bicgk", "gemver"]
    for r, s in zip(rows, data["sequences"]):
        assert r.stale == 0 and len(r.plans) == len(s["measured"]) == 6
        for (rank, measured, us, alt), m in zip(r.plans, s["measured"]):
            assert rank == m["rank"] and measured == m["measured_us"] and alt is None
            assert us == pytest.approx(m["predicted_us"], abs=0.05 * len(m["plan_json"]) + 1e-9)
        # the lowest price among the measured plans: rank 1's, or one the ranker's rounding (0.1 us a
        # kernel) tied with it; the invented times make plan 3 the best, 0.8 of its prediction
        got = r.choice(2)
        assert got is not None and got[1] == s["measured"][got[0] - 1]["measured_us"]
        assert s["measured"][got[0] - 1]["predicted_us"] <= s["measured"][0]["predicted_us"] + 0.1
        assert r.best_us() == s["measured"][2]["measured_us"]


def test_an_alternative_launch_term_moves_each_plan_by_its_kernels():
    data = _report([GEMVER])
    rows, _ = reprice.reprice(data, lambda m: alternative_model(m, 1520.0, None))
    model = kfuse.compile(GEMVER, tuned=False).search.model
    step = (1520.0 - model.cal.launch_ns) * 1e-3
    for (rank, _, us, alt), m in zip(rows[0].plans, data["sequences"][0]["measured"]):
        assert alt == pytest.approx(us + step * len(m["plan_json"]), abs=1e-6)
    text = reprice.markdown(rows, data, "ranking", "alternative")
    assert "- ranking model: predicted / measured median" in text and "- alternative: predicted / measured" in text
    assert "within 5 % of the measured best on 0 of 1 sequences" in text    # rank 1 over the best: 1.25


def test_a_plan_that_no_longer_fits_is_counted_not_a_crash():
    data = _report([BICGK], top=3)
    data["sequences"][0]["measured"][1]["plan_json"][0]["calls"][0]["variant"] = "no_such_variant"
    logged = []
    rows, _ = reprice.reprice(data, log=logged.append)
    assert rows[0].stale == 1 and [p[0] for p in rows[0].plans] == [1, 3]
    assert "no longer fits" in logged[0]
    assert "1 measured plan(s) no longer fit" in reprice.markdown(rows, data, "m", None)


@pytest.mark.parametrize("mend, message", [
    (lambda d: d.pop("header"), "no header"),
    (lambda d: d["header"].update(dtype="float16"), "header.dtype"),
    (lambda d: d["sequences"][0].pop("script"), "run kfuse report again"),
    (lambda d: d["sequences"][0]["measured"][0].pop("plan_json"), "run kfuse report again"),
    (lambda d: d["sequences"][0]["sizes"].update(n=-3), "sizes"),
    (lambda d: d["sequences"][0]["measured"][0].update(measured_us=float("nan")), "measured_us"),
    (lambda d: d["sequences"][0]["measured"][0].update(rank=True), "rank"),
    (lambda d: d.update(sequences=[]), "no sequences"),
])
def test_what_is_not_a_report_is_refused_by_name(tmp_path, mend, message):
    data = _report([BICGK], top=2)
    mend(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KfuseError, match=message):
        reprice.load_report(path)


def test_the_command_line_reprices_without_a_gpu(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report([BICGK, GEMVER])))
    assert main(["report", "--reprice", str(path), "--alt-launch-ns", "1520"]) == 0
    out = (tmp_path / "r-repriced.md").read_text()
    assert out.startswith("# Report repriced: test, float32") and "| gemver | 6 |" in out
    assert "- alternative: predicted / measured median" in capsys.readouterr().out
    path.write_text("{not json")
    assert main(["report", "--reprice", str(path)]) == 1
    assert "not a kfuse report's JSON" in capsys.readouterr().err
    assert main(["report", "--reprice", str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["report", "--reprice", str(path), "--random", "3"]) == 1
    assert "--random and --seq do not apply" in capsys.readouterr().err
    path.write_text(json.dumps(_report([BICGK], top=2)))
    assert main(["report", "--reprice", str(path), "--out", str(path)]) == 1       # the report kept
    assert "is the report repriced itself" in capsys.readouterr().err and json.loads(path.read_text())
    assert main(["report", "--reprice", str(path), "--out", str(tmp_path / "new" / "r.md")]) == 0
    assert (tmp_path / "new" / "r.md").read_text().startswith("# Report repriced")


def test_spread_orders_every_index_once_first_then_halves():
    assert spread(1) == [0] and spread(4) == [0, 2, 1, 3]
    for n in (2, 3, 7, 33, 100):
        got = spread(n)
        assert sorted(got) == list(range(n)) and got[:2] == [0, n // 2]


def test_sampled_plans_take_each_kernel_count_in_turn_and_skip_the_top():
    compiled = kfuse.compile(GEMVER, tuned=False, sizes={"n": 1024})
    search = compiled.search
    top = list(itertools.islice(search.plans(), 5))
    unfused = priced_unfused(compiled, "float32")
    assert len(unfused.kernels) == len(compiled.program.calls) == len(unfused.codes) > 2
    assert unfused.predicted == pytest.approx(sum(unfused.parts)) and unfused.predicted > search.best().predicted
    pool = [unfused] + list(itertools.islice(search.plans(), 5, 400))
    counts = sorted({len(p.kernels) for p in pool})
    assert len(counts) >= 2                      # several kernel counts to take turns between
    got = sampled(top, pool, 2 * len(counts))
    keys = [json.dumps(plan_to_json(p)) for p in got]
    assert len(set(keys)) == len(got) == 2 * len(counts)
    assert not set(keys) & {json.dumps(plan_to_json(p)) for p in top}
    assert [len(p.kernels) for p in got[:len(counts)]] == counts        # one of each count, fewest first
    assert sampled(top, top, 3) == [] and len(sampled([], pool[:4], 10)) == 4


def test_a_report_with_samples_and_an_alternative_reprices(monkeypatch, tmp_path):
    """run_report's bookkeeping on the CPU (measure_plans stood in for: plan k 'measured' at its
    prediction times 1 + k/100, the second plan wrong): the sampled plans come after the top K and
    the alternative's choice, every measured plan keeps its JSON form, and the file it writes
    reprices."""
    from kfuse.bench import prediction
    from kfuse.tuning import measure

    def fake_measure(compiled, plans, dims, reps=30, log=None, label=""):
        return [(p.predicted * 1e6 * (1 + k / 100), k, None) for k, p in enumerate(plans) if k != 1], 0.0
    monkeypatch.setattr(measure, "measure_plans", fake_measure)
    monkeypatch.setattr(measure, "retime", lambda compiled, plans, dims, reps=20, rounds=5: [1.0, 1.0])
    results, header = prediction.run_report([BICGK, GEMVER], n=1024, top=3, reps=2, rounds=0, log=lambda m: None,
                                            alt_launch_ns=1520.0, sample=4)
    assert header["sample"] == 4
    for r in results:
        assert r.sampled_from is not None and r.sampled_from >= 4 and r.wrong == 1
        ranks = [m[0] for m in r.measured]
        assert max(ranks) >= r.sampled_from and all(k in r.plan_jsons for k in ranks)
        doc = r.to_json()
        assert doc["sampled_from"] == r.sampled_from and doc["script"] and doc["sizes"]
    text = prediction.markdown(results, header)
    assert "Sampled: 4 plans a sequence" in text
    data = json.loads(json.dumps({"header": header, "sequences": [r.to_json() for r in results]}))
    rows, _ = reprice.reprice(data)
    assert [len(r.plans) for r in rows] == [len(r.measured) for r in results] and not any(r.stale for r in rows)
