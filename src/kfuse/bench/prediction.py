"""``kfuse report``: how well the ranking model predicts, per example sequence (the paper's
Tables 4 and 5).

For each sequence: compile it (timed: the first implementation, on the CPU, without NVRTC), emit
the CUDA text of every implementation of every fusion (timed: all implementations), then measure
the top K plans in predicted order with the empirical search's machinery (``tuning.measure``; timed,
NVRTC included).  Table 4 gives the number of implementations, the rank of the measured best in
predicted order, and the first choice and the worst of the K relative to the best; Table 5 the
three times.  A third table sets predictions against measurements.  With an alternative model
(``--alt-launch-ns``/``--alt-clear-ns``: the ranking model's launch and clear terms replaced, e.g. by
a graph node's), the alternative's first choice is measured too (added to the K where it is not
among them) and set against the same best, and every measured plan is priced by it too (its
predicted / measured beside the ranking model's): a change to the model judged on the same timings.
"""
from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..codegen.module import module_source
from ..ir.plan import plan_to_json
from ..progress import Progress


@dataclass
class SequenceResult:
    name: str
    plans: int                      # plans of the whole sequence (implementations)
    fusion_impls: int               # implementations of fusions of two or more calls
    measured: list[tuple[int, float, float]] = field(default_factory=list)   # (rank, predicted us, measured us)
    wrong: int = 0                  # plans that gave a wrong result (skipped)
    first_s: float = 0.0            # compile: first implementation (CPU, no NVRTC)
    all_s: float = 0.0              # first + CUDA text of every implementation
    search_s: float = 0.0           # empirical search over the top K (NVRTC included)
    compile_s: float = 0.0          # the NVRTC part of it
    summaries: list[str] = field(default_factory=list)     # the measured plans, in predicted order
    # the first choice and the measured best timed again in turns (``retime``): (first us, best us)
    retimed: tuple[float, float] | None = None
    alt_rank: int | None = None     # the alternative model's first choice: its place in ``measured`` (rank)
    alt_predicted: dict[int, float] = field(default_factory=dict)   # rank -> the alternative model's us
    script: str = ""                # the script's text and sizes, and each measured plan's JSON form
    sizes: dict[str, int] = field(default_factory=dict)             # (``plan_to_json``, by rank): what
    plan_jsons: dict[int, list] = field(default_factory=dict)       # ``reprice`` prices again on the CPU
    sampled_from: int | None = None     # ranks from this one on: plans sampled beyond the top K (--sample)

    def to_json(self) -> dict:
        """Every measured plan (rank, predicted and measured us, plan summary and JSON form), and the
        script and sizes: enough for ``reprice`` to price the same plans with another model."""
        return {"name": self.name, "plans": self.plans, "wrong": self.wrong, "script": self.script,
                "sizes": dict(self.sizes),
                "measured": [{"rank": r, "predicted_us": p, "measured_us": m, "plan": self.summaries[r - 1],
                              **({"plan_json": self.plan_jsons[r]} if r in self.plan_jsons else {})}
                             for r, p, m in self.measured],
                **({"retimed": {"first_us": self.retimed[0], "best_us": self.retimed[1]}} if self.retimed else {}),
                **({"sampled_from": self.sampled_from} if self.sampled_from is not None else {}),
                **({"alternative_rank": self.alt_rank,
                    "alternative_predicted_us": {str(k): v for k, v in sorted(self.alt_predicted.items())}}
                   if self.alt_rank is not None else {})}

    @property
    def best(self) -> tuple[int, float, float] | None:
        return min(self.measured, key=lambda m: m[2]) if self.measured else None

    def first_over_best(self) -> float | None:
        first = next((m for m in self.measured if m[0] == 1), None)
        return first[2] / self.best[2] if first and self.best else None

    def first_over_best_retimed(self) -> float | None:
        """The first choice against the measured best, both timed again in turns (1.0 when the
        first choice is the best: nothing to compare)."""
        if self.best is not None and self.best[0] == 1:
            return 1.0
        return self.retimed[0] / self.retimed[1] if self.retimed else None

    def alt_over_best(self) -> float | None:
        """The alternative model's first choice against the measured best (None without one, or
        when it gave a wrong result)."""
        got = next((m for m in self.measured if m[0] == self.alt_rank), None)
        return got[2] / self.best[2] if got and self.best else None

    def worst_over_best(self) -> float | None:
        best = self.best
        return max(m[2] for m in self.measured) / best[2] if best else None


SAMPLE_POOL = 2000      # plans after the top K that --sample draws from


def plan_us(model, codes, dims: dict[int, int], entries: dict[int, int], itemsize: int) -> float:
    """A plan's kernels priced by ``model``: the sum of their kernel times, in microseconds."""
    return sum(model.kernel_time(c, dims, entries, itemsize) for c in codes) * 1e6


def spread(n: int) -> list[int]:
    """0 .. n-1 in an order that spreads them: the first, then the halves, the quarters..."""
    out: list[int] = []
    seen: set[int] = set()
    parts = 1
    while len(out) < n:
        for j in range(parts):
            i = j * n // parts
            if i not in seen:
                seen.add(i)
                out.append(i)
        parts *= 2
    return out


def priced_unfused(compiled, dtype: str):
    """The compiled program's unfused plan (a kernel a call), with its kernels and the ranking
    model's price, as the search's plans come."""
    import dataclasses

    import numpy as np
    from ..codegen import generate
    from ..fusion.plans import unfused_plan
    from ..ir.program import entries_of
    search = compiled.search
    plan = unfused_plan(compiled.program, compiled.library)
    codes = tuple(generate(plan, compiled.library))
    entries, itemsize = entries_of(compiled.program, search.dims), np.dtype(dtype).itemsize
    parts = tuple(search.model.kernel_time(c, search.dims, entries, itemsize) for c in codes)
    return dataclasses.replace(plan, predicted=sum(parts), parts=parts, codes=codes)


def sampled(plans: list, pool: list, count: int) -> list:
    """``count`` plans of ``pool`` (the unfused plan, then the plans after the top K in predicted
    order) not among ``plans``: taken in turn from each kernel count, fewest kernels first, each
    count's plans in an order spread over their place in the pool (``spread``), so the sample
    spans what the model ranks lower."""
    seen = {json.dumps(plan_to_json(p)) for p in plans}
    groups: dict[int, list] = {}
    for p in pool:
        if json.dumps(plan_to_json(p)) not in seen:
            groups.setdefault(len(p.kernels), []).append(p)
    orders = {k: iter(spread(len(g))) for k, g in groups.items()}
    chosen: list = []
    while len(chosen) < count and orders:
        for k in sorted(orders):
            i = next(orders[k], None)
            if i is None:
                del orders[k]
            elif len(chosen) < count:
                chosen.append(groups[k][i])
    return chosen


def measure_sequence(path: Path, dtype: str, n: int, N: int, top: int, reps: int, log,
                     rounds: int = 0, alternative=None, sample: int = 0) -> SequenceResult:
    import kfuse
    from .harness import sequence_dims
    from .records import display_name
    from ..tuning.measure import measure_plans, retime
    probe = kfuse.compile(path, dtype=dtype, tuned=False)          # for the script's size names
    dims = sequence_dims(probe.program, n, N)
    sizes = {d.name: dims[d.id] for d in probe.program.dims}
    t0 = time.perf_counter()
    compiled = kfuse.compile(path, dtype=dtype, sizes=sizes, tuned=False)
    first_s = time.perf_counter() - t0
    search = compiled.search
    assert search is not None, "a fused compile has a plan search"
    codes = list({id(code): code for impls in search.space.impls.values() for _, code in impls}.values())
    module_source(codes, compiled.library, dtype)
    all_s = time.perf_counter() - t0
    res = SequenceResult(display_name(path.stem), search.count_plans(), search.count_implementations(),
                         first_s=first_s, all_s=all_s, script=path.read_text(), sizes=sizes)
    t1 = time.perf_counter()
    plans = list(itertools.islice(search.plans(), top))
    if alternative is not None:     # the alternative model's first choice, measured with the K
        alt = kfuse.compile(path, dtype=dtype, sizes=sizes, tuned=False, calibration=alternative).plan
        found = [k for k, p in enumerate(plans) if plan_to_json(p) == plan_to_json(alt)]
        if not found:
            plans.append(alt)
        res.alt_rank = (found[0] if found else len(plans) - 1) + 1
    if sample:                      # plans the model ranks lower, measured too (ranks after the K)
        res.sampled_from = len(plans) + 1
        pool = [priced_unfused(compiled, dtype)] + list(itertools.islice(search.plans(), top, top + SAMPLE_POOL))
        plans += sampled(plans, pool, sample)
    if alternative is not None:     # every measured plan as the alternative model prices it
        import numpy as np
        from ..ir.program import entries_of
        entries, itemsize = entries_of(search.program, search.dims), np.dtype(dtype).itemsize
        res.alt_predicted = {k + 1: plan_us(alternative, p.codes, search.dims, entries, itemsize)
                             for k, p in enumerate(plans) if p.codes}
    results, res.compile_s = measure_plans(compiled, plans, search.dims, reps=reps, log=log, label="report")
    res.search_s = time.perf_counter() - t1
    res.measured = sorted((k + 1, plans[k].predicted * 1e6, t) for t, k, _ in results)
    res.wrong = len(plans) - len(results)
    res.summaries = [p.summary() for p in plans]
    res.plan_jsons = {k + 1: plan_to_json(p) for k, p in enumerate(plans)}
    best = res.best
    if rounds and best is not None and best[0] != 1 and any(m[0] == 1 for m in res.measured):
        first_us, best_us = retime(compiled, [plans[0], plans[best[0] - 1]], search.dims, reps=reps, rounds=rounds)
        res.retimed = (first_us, best_us)
        log(f"  re-timed in {rounds} rounds: first {first_us:.1f} us, best (plan {best[0]}) {best_us:.1f} us")
    return res


def _f(x: float | None, fmt: str = "{:.3f}") -> str:
    return "–" if x is None else fmt.format(x)


def markdown(results: list[SequenceResult], header: dict) -> str:
    lines = [f"# Prediction report: {header.get('gpu', '?')}, {header.get('dtype', '?')}", "",
             f"Ranking model: {header.get('model', '?')}.  Sizes: n = {header.get('n')} (scripts with a "
             f"matrix), N = {header.get('N')} (vector scripts).  The top {header.get('top')} plans in "
             f"predicted order were checked and timed (median of {header.get('reps')} CUDA-event timings)."]
    rounds = header.get("rounds") or 0
    if rounds:
        lines += ["", f"Re-timed: the first choice and the measured best timed again in turns, {rounds} rounds "
                  "(median of the rounds), where they differ: the best of many plans timed once each is "
                  "biased low, since the plan whose timing happened to fall low wins."]
    if header.get("sample"):
        lines += ["", f"Sampled: {header['sample']} plans a sequence from the next {SAMPLE_POOL} in predicted order "
                  "(every kernel count in turn) were measured too, after the top ones: they take part in the "
                  "measured best, so a first choice is also set against plans the model ranked lower."]
    if header.get("alternative"):
        lines += ["", f"Alternative model: {header['alternative']}; its first choice was measured with the top "
                  f"{header.get('top')} (added where not among them)."]
    lines += ["", "## Table 4: ranking", "",
              "| sequence | implementations (plans) | fusion implementations | measured | rank of the measured best "
              "| first choice / best | re-timed | worst / best |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        best = r.best
        lines.append(f"| {r.name} | {r.plans} | {r.fusion_impls} | {len(r.measured)}"
                     + (f" ({r.wrong} wrong)" if r.wrong else "")
                     + f" | {best[0] if best else '–'} | {_f(r.first_over_best())} | {_f(r.first_over_best_retimed())}"
                     f" | {_f(r.worst_over_best())} |")
    firsts = [("", SequenceResult.first_over_best), (" (re-timed)", SequenceResult.first_over_best_retimed)]
    if header.get("alternative"):
        firsts.append((" of the alternative model", SequenceResult.alt_over_best))
        lines += ["", "| sequence | alternative's first choice: rank | / best |", "| --- | ---: | ---: |"]
        lines += [f"| {r.name} | {r.alt_rank if r.alt_rank is not None else '–'} | {_f(r.alt_over_best())} |"
                  for r in results]
    for label, ratio in firsts:
        got = sorted(f for r in results if (f := ratio(r)) is not None)
        if not got:
            continue
        p90 = got[min(len(got) - 1, int(0.9 * len(got)))]
        within = sum(f <= 1.05 for f in got)
        lines += ["", f"First choice / best{label} over {len(got)} sequences: median {statistics.median(got):.3f}, "
                  f"90th percentile {p90:.3f}, worst {got[-1]:.3f}; within 5 % of the best: {within} of {len(got)}."]
    lines += ["", "## Table 5: times", "",
              "| sequence | first implementation s (CPU, no NVRTC) | all implementations s | empirical search s "
              "(NVRTC s) |", "| --- | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r.name} | {r.first_s:.3f} | {r.all_s:.3f} | {r.search_s:.1f} ({r.compile_s:.1f}) |")
    lines += ["", "\"All implementations\" is the compile (which builds every implementation of every fusion "
              "to rank it) plus the CUDA text of all of them.", "",
              "## Prediction against measurement", "",
              "| sequence | first: predicted / measured us | best: predicted / measured us (rank) "
              "| median predicted/measured | range |" + (" alternative: median | range |" if header.get("alternative") else ""),
              "| --- | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if header.get("alternative") else "")]
    for r in results:
        if not r.measured:
            lines.append(f"| {r.name} | – | – | – | – |" + (" – | – |" if header.get("alternative") else ""))
            continue
        first = next((m for m in r.measured if m[0] == 1), None)
        best = r.best
        assert best is not None                 # measured
        ratios = [p / m for _, p, m in r.measured if m > 0]
        alt = [r.alt_predicted[k] / m for k, _, m in r.measured if m > 0 and k in r.alt_predicted]
        lines.append(f"| {r.name} | {f'{first[1]:.1f} / {first[2]:.1f}' if first else '–'} | "
                     f"{best[1]:.1f} / {best[2]:.1f} ({best[0]}) | {statistics.median(ratios):.2f} | "
                     f"{min(ratios):.2f} – {max(ratios):.2f} |"
                     + (f" {statistics.median(alt):.2f} | {min(alt):.2f} – {max(alt):.2f} |" if alt else
                        (" – | – |" if header.get("alternative") else "")))
    return "\n".join(lines) + "\n"


def random_scripts(folder: Path, count: int, seed: int, lib=None) -> list[Path]:
    """``count`` scripts of the generator (frontend/random_scripts.py) from ``seed`` on, written to
    ``folder`` (kept beside the report, so that every row can be reproduced)."""
    from ..frontend.random_scripts import random_script
    from ..library.loader import load_library
    lib = lib or load_library()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(seed, seed + count):
        path = folder / f"random{s}.kf"
        path.write_text(random_script(lib, s).text)
        paths.append(path)
    return paths


def alternative_model(model, launch_ns: float | None, clear_ns: float | None):
    """``model`` (calibrated or the transfer model) with its launch and clear terms replaced
    (nanoseconds a kernel; None: kept)."""
    from dataclasses import replace
    from ..cost.calibrated import CalibratedModel
    if isinstance(model, CalibratedModel):
        cal = model.cal
        return CalibratedModel(replace(cal, launch_ns=cal.launch_ns if launch_ns is None else launch_ns,
                                       clear_ns=cal.clear_ns if clear_ns is None else clear_ns))
    return replace(model, launch=model.launch if launch_ns is None else launch_ns * 1e-9,
                   clear=model.clear if clear_ns is None else clear_ns * 1e-9)


def run_report(paths: list[Path], dtype: str = "float32", n: int = 8192, N: int = 2**26, top: int = 20,
               reps: int = 20, log=None, checkpoint=None, rounds: int = 0, alt_launch_ns: float | None = None,
               alt_clear_ns: float | None = None, sample: int = 0) -> tuple[list[SequenceResult], dict]:
    import kfuse
    from ..runtime.gpu import gpu_name
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    search = kfuse.compile(paths[0], dtype=dtype, tuned=False).search if paths else None
    model = search.model if search is not None else None
    header = {"gpu": gpu_name() or "no GPU", "dtype": dtype, "n": n, "N": N, "top": top, "reps": reps, "rounds": rounds,
              "model": getattr(model, "name", "?"), "sample": sample}
    alternative = None
    if model is not None and (alt_launch_ns is not None or alt_clear_ns is not None):
        alternative = alternative_model(model, alt_launch_ns, alt_clear_ns)
        header["alternative"] = (f"{getattr(model, 'name', '?')} with launch {alt_launch_ns} ns and clear "
                                 f"{alt_clear_ns} ns a kernel (None: as it is)")
    results = []
    with Progress("report: sequences", len(paths), log) as bar:
        for k, path in enumerate(paths):
            log(f"report [{k + 1}/{len(paths)}] {Path(path).stem}")
            results.append(measure_sequence(Path(path), dtype, n, N, top, reps, log, rounds, alternative, sample))
            bar.step()
            if checkpoint:
                checkpoint(results, header)
    return results, header
