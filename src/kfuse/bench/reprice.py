"""``kfuse report --reprice FILE.json``: the plans a report measured, priced again on the CPU.

A report (``bench/prediction.py``) keeps every measured plan's JSON form beside the script and
its sizes.  Repricing compiles each script again at those sizes, rebuilds each measured plan
(``ir/plan.plan_from_json``: checked against the program, never trusted) and prices it with the
ranking model this machine plans with, and with an alternative (launch and clear terms
replaced).  Set against the times measured on the GPU, that says how a change to the model would
predict and choose on the same timings, without a GPU: predicted / measured per plan, and which
of the measured plans each model would rank first (against the measured best; a model's true
first choice may lie outside the measured plans, so this judges its ranking among them only).

The file is data read from disk: every field is checked before use, and a report written before
plans were kept (no ``script`` or ``plan_json``) is refused with a message saying so.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KfuseError

WITHIN = (0.8, 1.25)        # predicted / measured counted as close
CLOSE = 1.05                # a choice within 5 % of the measured best


@dataclass
class Repriced:
    """One sequence: per measured plan (rank in the report, measured us, the ranking model's us,
    the alternative's us or None); plans that no longer fit the program are counted in ``stale``."""
    name: str
    plans: list[tuple[int, float, float, float | None]] = field(default_factory=list)
    stale: int = 0

    def best_us(self) -> float:
        return min(m for _, m, _, _ in self.plans)

    def choice(self, which: int) -> tuple[int, float] | None:
        """(rank, measured us) of the plan the model ``which`` (2: ranking, 3: alternative) prices
        lowest among the measured ones; ties go to the report's rank order."""
        priced = [p for p in self.plans if p[which] is not None]
        if not priced:
            return None
        got = min(priced, key=lambda p: (p[which], p[0]))
        return got[0], got[1]


def _problem(data) -> str | None:
    """The first part of a report's JSON that is not what ``kfuse report`` writes, or None."""
    if not isinstance(data, dict) or not isinstance(data.get("header"), dict):
        return "no header"
    if data["header"].get("dtype") not in ("float32", "float64"):
        return "header.dtype"
    seqs = data.get("sequences")
    if not isinstance(seqs, list) or not seqs:
        return "no sequences"
    for k, s in enumerate(seqs):
        where = f"sequences[{k}]"
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            return where
        if not isinstance(s.get("script"), str) or not s["script"].strip():
            return f"{where}.script (a report written before kfuse kept its scripts and plans: run kfuse report again)"
        sizes = s.get("sizes")
        if not isinstance(sizes, dict) or not all(isinstance(n, str) and isinstance(v, int) and not isinstance(v, bool)
                                                  and 1 <= v <= 1 << 40 for n, v in sizes.items()):
            return f"{where}.sizes"
        measured = s.get("measured")
        if not isinstance(measured, list):
            return f"{where}.measured"
        for j, m in enumerate(measured):
            if not isinstance(m, dict) or not isinstance(m.get("rank"), int) or isinstance(m.get("rank"), bool):
                return f"{where}.measured[{j}].rank"
            t = m.get("measured_us")
            if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t <= 0:
                return f"{where}.measured[{j}].measured_us"
            if "plan_json" not in m:
                return (f"{where}.measured[{j}].plan_json (a report written before kfuse kept its plans: run "
                        "kfuse report again)")
    return None


def load_report(path: str | Path) -> dict:
    """A report's JSON, checked (``_problem``); a KfuseError names what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise KfuseError(f"{path}: cannot read: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise KfuseError(f"{path}: not a kfuse report's JSON ({type(e).__name__}: {e})") from None
    problem = _problem(data)
    if problem:
        raise KfuseError(f"{path}: not a report kfuse can reprice: {problem}")
    return data


def reprice(data: dict, alternative=None, log=None) -> tuple[list[Repriced], str]:
    """Each sequence of a checked report priced by the model ``kfuse.compile`` ranks with here (its
    name is returned) and by ``alternative(model)`` where given (a function of the model, e.g.
    ``lambda m: prediction.alternative_model(m, 1520, None)``)."""
    import numpy as np

    import kfuse
    from ..codegen import generate
    from ..ir.plan import plan_from_json
    from ..ir.program import entries_of
    from .prediction import plan_us
    dtype = data["header"]["dtype"]
    itemsize = np.dtype(dtype).itemsize
    out, name = [], "?"
    for s in data["sequences"]:
        compiled = kfuse.compile(s["script"], dtype=dtype, sizes=dict(s["sizes"]), tuned=False)
        search = compiled.search
        if search is None:
            raise KfuseError(f"{s['name']}: the script compiles without a plan search (nothing to price)")
        model = search.model
        name = getattr(model, "name", "?")
        alt = alternative(model) if alternative is not None else None
        dims, program = search.dims, compiled.program
        entries = entries_of(program, dims)
        res = Repriced(s["name"])
        for m in s["measured"]:
            try:
                codes = generate(plan_from_json(program, m["plan_json"]), compiled.library)
            except KfuseError as e:
                res.stale += 1
                if log:
                    log(f"  {s['name']} plan {m['rank']}: no longer fits ({e})")
                continue
            us = plan_us(model, codes, dims, entries, itemsize)
            alt_us = plan_us(alt, codes, dims, entries, itemsize) if alt is not None else None
            res.plans.append((m["rank"], float(m["measured_us"]), us, alt_us))
        out.append(res)
    return out, name


def _summary(rows: list[Repriced], which: int, label: str) -> list[str]:
    ratios = sorted(v / p[1] for r in rows for p in r.plans if (v := p[which]) is not None)
    choices = [(r, r.choice(which)) for r in rows if r.plans]
    over = sorted(c[1] / r.best_us() for r, c in choices if c is not None)
    if not ratios or not over:
        return []
    close = sum(WITHIN[0] <= x <= WITHIN[1] for x in ratios)
    return [f"- {label}: predicted / measured median {statistics.median(ratios):.2f}, range {ratios[0]:.2f} - "
            f"{ratios[-1]:.2f}, within {WITHIN[0]}-{WITHIN[1]}x on {close} of {len(ratios)} plans; its choice "
            f"among the measured plans within 5 % of the measured best on {sum(x <= CLOSE for x in over)} of "
            f"{len(over)} sequences (median {statistics.median(over):.3f}, worst {over[-1]:.3f})"]


def markdown(rows: list[Repriced], data: dict, model_name: str, alt_label: str | None) -> str:
    h = data["header"]
    lines = [f"# Report repriced: {h.get('gpu', '?')}, {h['dtype']}", "",
             f"The plans measured by `kfuse report` ({h.get('model', '?')} ranking them then) priced again on "
             f"the CPU by {model_name}" + (f" and by {alt_label}" if alt_label else "") + ". A model's choice is "
             "the measured plan it prices lowest: its ranking among the measured plans, not over every plan.", ""]
    lines += _summary(rows, 2, "ranking model")
    if alt_label:
        lines += _summary(rows, 3, "alternative")
    stale = sum(r.stale for r in rows)
    if stale:
        lines += [f"- {stale} measured plan(s) no longer fit their program (the library or planner changed) and "
                  "were left out"]
    head = "| sequence | plans | measured best us | choice: rank, / best | predicted / measured (median) |"
    rule = "| --- | ---: | ---: | ---: | ---: |"
    if alt_label:
        head += " alternative's choice: rank, / best | alternative: predicted / measured (median) |"
        rule += " ---: | ---: |"
    lines += ["", head, rule]
    for r in rows:
        if not r.plans:
            lines.append(f"| {r.name} | 0 | – | – | – |" + (" – | – |" if alt_label else ""))
            continue
        best = r.best_us()
        cells = [r.name, str(len(r.plans)), f"{best:.1f}"]
        for which in (2, 3) if alt_label else (2,):
            c = r.choice(which)
            cells.append(f"{c[0]}, {c[1] / best:.3f}" if c else "–")
            got = [v / p[1] for p in r.plans if (v := p[which]) is not None]
            cells.append(f"{statistics.median(got):.2f}" if got else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["Repriced", "load_report", "reprice", "markdown"]
