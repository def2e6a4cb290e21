"""What a run's records mean and how they are written: derived metrics (GFLOPS, bandwidth,
limits, speedups), the Markdown table (the layout of ../shared/ANCHORS.md and the paper's
Tables 2 and 3, with the added peers), the CSV, env.json and the PNG charts.  Pure Python;
matplotlib only for the charts, and only when importable.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from .records import (COLOURS, CONTENDERS, CUBLAS, KFUSE, NOT_AVAILABLE, OK, PEERS, TORCH_COMPILE, TORCH_EAGER, WRONG, BenchRun,
                      Record, SequenceInfo, display_name)

SHORT = {CUBLAS: "cuBLAS", TORCH_EAGER: "eager", TORCH_COMPILE: "compile"}
CSV_FIELDS = ("sequence", "name", "dtype", "sizes", "contender", "status", "time_us", "q1_us", "q3_us", "error", "tolerance",
              "gflops", "flops", "plan_bytes", "onepass_bytes", "limit_us", "onepass_us", "gbps", "frac_copy",
              "frac_copy_onepass", "kfuse_speedup", "kernels", "input_bytes", "input_sets", "copy_gbps", "plan",
              "tuned", "note")


# --- metrics (times in microseconds, bandwidths in GB/s = 1e9 bytes per second) ----------------

def gflops(flops: int, time_us: float) -> float:
    return flops / time_us / 1e3


def gbps(nbytes: int, time_us: float) -> float:
    return nbytes / time_us / 1e3


def limit_us(nbytes: int, bandwidth_gbps: float) -> float:
    """The time to move ``nbytes`` at ``bandwidth_gbps``: the floor for a memory-bound kernel."""
    return nbytes / bandwidth_gbps / 1e3


def speedup(peer_us: float, kfuse_us: float) -> float:
    """Speedup of kfuse over a peer: above 1 when kfuse is faster."""
    return peer_us / kfuse_us


def fmt_size(v: int) -> str:
    """8192 -> '8192'; 67108864 -> '2^26' (powers of two from 2^20 up)."""
    return f"2^{v.bit_length() - 1}" if v >= 2**20 and v & (v - 1) == 0 else str(v)


def fmt_bytes(n: int) -> str:
    """Decimal units, as bandwidths are: 268435456 -> '268 MB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}" if n < 100 * scale else f"{n / scale:.0f} {unit}"
    return f"{n} B"


def fmt_cuda_version(v) -> str:
    """12080 -> '12.8'."""
    return f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) else str(v)


def _timed(r: Record | None) -> float | None:
    return r.time_us if r is not None and r.status == OK else None


def metrics(run: BenchRun, info: SequenceInfo, r: Record) -> dict:
    """Every derived number of one record (None where it has no time)."""
    t = _timed(r)
    k = _timed(run.record(info.sequence, info.dtype, KFUSE))
    gb = gbps(info.plan_bytes, t) if t else None
    return {
        "gflops": gflops(info.flops, t) if t else None,
        "limit_us": limit_us(info.plan_bytes, run.copy_gbps),
        "onepass_us": limit_us(info.onepass_bytes, run.copy_gbps),
        "gbps": gb,
        "frac_copy": gb / run.copy_gbps if gb else None,
        "frac_copy_onepass": gbps(info.onepass_bytes, t) / run.copy_gbps if t else None,
        "kfuse_speedup": speedup(t, k) if t and k else None,
    }


# --- CSV ------------------------------------------------------------------------------------------

def csv_rows(run: BenchRun) -> list[dict]:
    """One row per sequence x contender x dtype, with every number."""
    out = []
    for info in run.sequences:
        for c in CONTENDERS:
            r = run.record(info.sequence, info.dtype, c)
            if r is None:
                continue
            row = {"sequence": info.sequence, "name": display_name(info.sequence), "dtype": info.dtype,
                   "sizes": ";".join(f"{k}={v}" for k, v in info.sizes.items()), "contender": c,
                   "status": r.status, "time_us": r.time_us, "q1_us": r.q1_us, "q3_us": r.q3_us, "error": r.error, "tolerance": r.tolerance,
                   "flops": info.flops, "plan_bytes": info.plan_bytes, "onepass_bytes": info.onepass_bytes,
                   "kernels": info.kernels if c == KFUSE else None, "input_bytes": info.input_bytes,
                   "input_sets": info.input_sets, "copy_gbps": run.copy_gbps,
                   "plan": info.plan if c == KFUSE else None, "tuned": info.tuned if c == KFUSE else None,
                   "note": r.note}
            row.update(metrics(run, info, r))
            out.append({k: row[k] for k in CSV_FIELDS})
    return out


def write_csv(run: BenchRun, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for row in csv_rows(run):
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})


# --- Markdown -------------------------------------------------------------------------------------

def _time_cell(r: Record | None) -> str:
    if r is None:
        return "—"
    if r.status == OK:
        spread = f" ({r.q1_us:.1f}–{r.q3_us:.1f})" if r.q1_us is not None and r.q3_us is not None else ""
        return f"{r.time_us:.1f}{spread}"
    if r.status == WRONG:
        return f"WRONG ({r.error:.0e})"
    return r.status


def _num(v: float | None, fmt: str) -> str:
    return "—" if v is None or not math.isfinite(v) else format(v, fmt)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| --- | " + " | ".join("---:" for _ in header[1:]) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _pct(f: float | None) -> str:
    return "—" if f is None else f"{f * 100:.0f}%"


def _times(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def main_table(run: BenchRun, dtype: str) -> list[str]:
    header = ["sequence", *CONTENDERS, "limit", "one-pass", "kfuse GFLOPS", "kfuse GB/s", "% of copy",
              *(f"vs {SHORT[p]}" for p in PEERS), "kernels"]
    rows = []
    for info in run.infos(dtype):
        recs = {c: run.record(info.sequence, dtype, c) for c in CONTENDERS}
        m = {c: metrics(run, info, r) if r is not None else {} for c, r in recs.items()}
        rows.append([display_name(info.sequence), *(_time_cell(recs[c]) for c in CONTENDERS),
                     _num(limit_us(info.plan_bytes, run.copy_gbps), ".1f"),
                     _num(limit_us(info.onepass_bytes, run.copy_gbps), ".1f"),
                     _num(m[KFUSE].get("gflops"), ".1f"), _num(m[KFUSE].get("gbps"), ".0f"),
                     _pct(m[KFUSE].get("frac_copy")),
                     *(_times(m[p].get("kfuse_speedup")) for p in PEERS),
                     str(info.kernels)])
    return _table(header, rows)


def bandwidth_table(run: BenchRun, dtype: str) -> list[str]:
    rows = []
    for info in run.infos(dtype):
        recs = [run.record(info.sequence, dtype, c) for c in CONTENDERS]
        rows.append([display_name(info.sequence),
                     *(_pct(metrics(run, info, r)["frac_copy"] if r is not None else None) for r in recs)])
    return _table(["sequence", *CONTENDERS], rows)


def markdown(run: BenchRun) -> str:
    env = run.env
    gpu = env.get("gpu", "unknown GPU")
    lines = [f"# kfuse benchmark: {gpu}", ""]
    lines.append(f"- Copy bandwidth: **{run.copy_gbps:.0f} GB/s** (device-to-device copy of "
                 f"{run.copy_bytes / 2**20:.0f} MiB, bytes read plus bytes written, measured in the same run).")
    lines.append(f"- Sizes: n = {fmt_size(run.n)} (matrices), N = {fmt_size(run.N)} (vectors); every dimension "
                 "of a script with a matrix is n, of one without is N.")
    lines.append(f"- Times: median of {run.reps} CUDA-event timings after {run.warmup} warm-up calls, in "
                 "microseconds, with the first and third quartiles in brackets (the spread), every call after a read of 4 x L2 outside the timing (no call finds the one "
                 "before it in L2); every result checked against a float64 NumPy reference before timing.")
    lines.append("- " + _l2_note(run))
    for name, why in run.peer_notes.items():
        lines.append(f"- {name}: not available: {why}.")
    parts = [f"driver {env.get('driver_version')}",
             f"CUDA runtime {fmt_cuda_version(env.get('cuda_runtime_version'))}",
             f"CuPy {env.get('cupy')}", f"PyTorch {env.get('torch')}", f"NumPy {env.get('numpy')}",
             f"Python {env.get('python')}",
             f"kfuse {env.get('kfuse')} (library {env.get('library_digest')})", f"{env.get('date')}"]
    lines.append("- Environment: " + ", ".join(parts) + ".")
    if env.get("command"):
        lines.append(f"- Command: `{env['command']}`")
    lines += ["",
              "\"limit\" is the traffic of kfuse's plan (each kernel loads and stores each of its arrays once) "
              "divided by the copy bandwidth; \"one-pass\" is the traffic if every input were read once and "
              "every output written once, divided by the same. \"kfuse GB/s\" is the plan's traffic over "
              "kfuse's time and \"% of copy\" its fraction of the copy bandwidth; GFLOPS count the script's "
              "flops. \"vs X\" is the speedup of kfuse over X (X's time / kfuse's time; above 1: kfuse is "
              "faster). \"kernels\": kernels kfuse launches per call. WRONG (error): the result failed the "
              "check and was not timed; n/a: not installed or skipped; missing: no peer written for the "
              "sequence; error: see the notes.", ""]
    for dtype in run.dtypes():
        lines += [f"## {dtype}", ""] + main_table(run, dtype)
        lines += ["", f"Fraction of the copy bandwidth ({dtype}; the plan's traffic over each contender's time):",
                  ""] + bandwidth_table(run, dtype) + [""]
        notes = [r for r in run.records if r.dtype == dtype and r.status not in (OK, NOT_AVAILABLE)]
        if notes:
            lines += [f"Notes ({dtype}):", ""]
            lines += [f"- {display_name(r.sequence)}, {r.contender}: {r.status}: {r.note}" for r in notes]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _l2_note(run: BenchRun) -> str:
    l2 = f"{run.l2_bytes / 2**20:.0f} MiB"
    rotated = [s for s in run.sequences if s.input_sets > 1]
    if not run.sequences:
        return f"L2 cache: {l2}."
    if not rotated:
        least = fmt_bytes(min(s.input_bytes for s in run.sequences))
        return (f"L2 cache: {l2}. Every sequence's inputs ({least} or more per call) are larger than "
                "the L2 cache, so each repetition streams its data from memory.")
    listed = ", ".join(f"{display_name(s.sequence)} {s.dtype} ({s.input_sets} sets)" for s in rotated)
    return (f"L2 cache: {l2}. Sequences whose inputs are under 4 x L2 rotate between input sets from one "
            f"repetition to the next: {listed}.")


# --- env.json, charts, all outputs ------------------------------------------------------------

def env_json(run: BenchRun) -> dict:
    return {**run.env,
            "copy_bandwidth_gbps": run.copy_gbps, "copy_bytes": run.copy_bytes,
            "settings": {"n": run.n, "N": run.N, "reps": run.reps, "warmup": run.warmup,
                         "dtypes": run.dtypes(), "sequences": list(dict.fromkeys(s.sequence for s in run.sequences))},
            "peers_not_available": run.peer_notes}


def write_charts(run: BenchRun, folder: Path) -> tuple[list[Path], list[str]]:
    """speedup.png and bandwidth.png: (paths written, notes on what was not)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [], [f"matplotlib is not importable ({e}): no PNG charts"]
    dtypes = run.dtypes()
    if not dtypes:
        return [], ["no sequence measured: no PNG charts"]
    gpu = run.env.get("gpu", "GPU")
    written = []
    for fname, groups, ylabel in (
            ("speedup.png", PEERS, "speedup of kfuse (peer time / kfuse time)"),
            ("bandwidth.png", CONTENDERS, "fraction of copy bandwidth (plan traffic / time)")):
        fig, axes = plt.subplots(len(dtypes), 1, figsize=(12, 4.2 * len(dtypes)), squeeze=False)
        for ax, dtype in zip(axes[:, 0], dtypes):
            infos = run.infos(dtype)
            width = 0.8 / len(groups)
            for j, c in enumerate(groups):
                vals = []
                for info in infos:
                    r = run.record(info.sequence, dtype, c)
                    m = metrics(run, info, r) if r is not None else {}
                    vals.append(m.get("kfuse_speedup" if fname == "speedup.png" else "frac_copy") or float("nan"))
                xs = [i + (j - (len(groups) - 1) / 2) * width for i in range(len(infos))]
                ax.bar(xs, vals, width, label=c, color=COLOURS[c])
                for x, info in zip(xs, infos):
                    r = run.record(info.sequence, dtype, c)
                    if r is not None and r.status == WRONG:
                        ax.text(x, 0, "WRONG", rotation=90, ha="center", va="bottom", fontsize=7)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(infos)), [display_name(s.sequence) for s in infos])
            ax.set_ylabel(ylabel)
            ax.set_title(f"{gpu}, {dtype}, n = {fmt_size(run.n)}, N = {fmt_size(run.N)}")
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)   # off the bars
        fig.tight_layout()
        fig.savefig(folder / fname, dpi=120)
        plt.close(fig)
        written.append(folder / fname)
    return written, []


def write_outputs(run: BenchRun, folder: str | Path, charts: bool = True) -> tuple[list[Path], list[str]]:
    """results.md, results.csv, env.json (and the charts) in ``folder``: (paths written, notes)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.md").write_text(markdown(run))
    write_csv(run, folder / "results.csv")
    (folder / "env.json").write_text(json.dumps(env_json(run), indent=2, default=str) + "\n")
    written, notes = [folder / n for n in ("results.md", "results.csv", "env.json")], list[str]()
    if charts:
        paths, notes = write_charts(run, folder)
        written += paths
    return written, notes
