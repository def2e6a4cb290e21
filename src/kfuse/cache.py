"""What ``kfuse cache`` lists, shows and clears: the tuning store and the calibration files.

Read through the stores' public functions only (tuning/store.py, cost/store.py): nothing here
writes into them; ``clear`` removes the user's own files whole, never the shipped calibrations."""
from __future__ import annotations

import logging
from pathlib import Path

_log = logging.getLogger("kfuse")


def _tuning_path() -> Path:
    from .tuning.store import default_path
    return default_path()


def _calibration_paths() -> list[Path]:
    from .cost.store import search_paths, user_path
    paths = search_paths()
    return paths if user_path() in paths else [user_path(), *paths]


def _shipped(path: Path) -> bool:
    from .cost.store import SHIPPED
    return path.parent == SHIPPED


def _tuning_records(path: Path) -> list[dict]:
    from .tuning.store import TuningStore
    return TuningStore(path, warn=_log.warning).records()


def _calibrations(path: Path) -> list:
    from .cost.store import read_file
    return read_file(path, warn=_log.warning)


def listing() -> list[dict]:
    """One row per file: kind, path, whether it exists, entries, whether it ships with kfuse."""
    path = _tuning_path()
    rows = [{"kind": "tuning", "path": str(path), "exists": path.exists(),
             "entries": len(_tuning_records(path)), "shipped": False}]
    for path in _calibration_paths():
        rows.append({"kind": "calibration", "path": str(path), "exists": path.exists(),
                     "entries": len(_calibrations(path)), "shipped": _shipped(path)})
    return rows


def show() -> dict:
    """Every valid tuning record (key, time, rank, date) and calibration entry (GPU, library,
    dtype, date), by file."""
    path = _tuning_path()
    tuning = [{"key": r.get("key"), "time_us": r.get("time_us"), "rank": r.get("rank"),
               "first_us": r.get("first_us"), "written": r.get("written"),
               "kernels": len(r.get("plan") or [])} for r in _tuning_records(path)]
    cals = []
    for p in _calibration_paths():
        for c in _calibrations(p):
            cals.append({"path": str(p), "gpu": c.gpu, "library": c.library, "dtype": c.dtype,
                         "written": c.meta.get("written"), "quick": c.meta.get("quick", False),
                         "routines": len(c.routines), "shipped": _shipped(p)})
    return {"tuning": {"path": str(path), "records": tuning}, "calibrations": cals}


def show_text(doc: dict) -> str:
    t = doc["tuning"]
    lines = [f"tuning store {t['path']}: {len(t['records'])} record(s)"]
    for r in t["records"]:
        k = r["key"] if isinstance(r["key"], dict) else {}
        lines.append(f"  {k.get('gpu', '?')}  script {k.get('script', '?')}  library {k.get('library', '?')}  "
                     f"{k.get('dtype', '?')}  {k.get('sizes', '?')}: {r['time_us']} us, plan rank {r['rank']}, "
                     f"{r['kernels']} kernel(s), {r['written']}")
    lines.append(f"calibrations: {len(doc['calibrations'])} entr{'y' if len(doc['calibrations']) == 1 else 'ies'}")
    for c in doc["calibrations"]:
        lines.append(f"  {c['gpu']}/{c['library']} ({c['dtype']}): {c['routines']} routines, "
                     f"{'quick, ' if c['quick'] else ''}{c['written']}  {c['path']}"
                     + (" (shipped)" if c["shipped"] else ""))
    return "\n".join(lines)


def clearable(which: list[str]) -> list[Path]:
    """The user's files ``kfuse cache clear`` removes: the tuning store and/or the user's
    calibration file (never a shipped one, nor one named by $KFUSE_CALIBRATION)."""
    from .cost.store import user_path
    out = []
    if "tuning" in which:
        out.append(_tuning_path())
    if "calibration" in which:
        out.append(user_path())
    return out
