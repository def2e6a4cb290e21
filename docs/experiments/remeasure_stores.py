"""Re-measure the float64 probe of the routine that stores through `KfVec::put4` (`quad_store`)
after `kf_store16_paired` (codegen/prelude.cuh) changed how it stores, and keep every other
number of the shipped H100 calibration (launch, clear, barriers, all other probes).  (Run first
with `qtile_store` too, when tiles stored by pairs as well: docs/experiments/README.md.)

A probe's id hashes its micro-kernel and its routine's source file, not the prelude, so
`kfuse calibrate` alone would reuse the old store times.

    on the GPU:  PYTHONPATH=src python3 docs/experiments/remeasure_stores.py measure NEW.json
    here:        PYTHONPATH=src python3 docs/experiments/remeasure_stores.py merge NEW.json
"""
import json
import sys
from pathlib import Path

from kfuse.calibration.measure import calibrate
from kfuse.calibration.probes import library_probes
from kfuse.cost.store import SHIPPED, Calibration
from kfuse.library.loader import load_library

FNS = ("quad_store",)
DTYPE = "float64"


def _shipped() -> tuple[dict, list[Calibration]]:
    path = SHIPPED / "H100.json"
    d = json.loads(path.read_text())
    return d, [Calibration.from_json(rec, str(path)) for rec in d["entries"]]


def _store_probes(lib) -> set[str]:
    _routines, probes = library_probes(lib)
    return {pid for pid, p in probes.items() if p.fn in FNS}


def measure(out: str) -> int:
    lib = load_library()
    _d, cals = _shipped()
    (old,) = [c for c in cals if c.dtype == DTYPE]
    pids = _store_probes(lib)
    reduced = Calibration(old.gpu, old.library, old.dtype, dict(old.device), old.launch_ns, old.clear_ns,
                          old.barrier_ns, old.routines,
                          {pid: v for pid, v in old.probes.items() if pid not in pids}, dict(old.meta))
    new = calibrate(lib, DTYPE, reuse=[reduced])
    for pid in sorted(pids):
        a = [p["ns"] for p in old.probes[pid]["points"] if p["occupancy"] == "full" and p["unroll"] == 1]
        b = [p["ns"] for p in new.probes[pid]["points"] if p["occupancy"] == "full" and p["unroll"] == 1]
        print(f"{pid}: ns per instance at unroll 1, full occupancy: {a} -> {b}")
    Path(out).write_text(json.dumps({"entries": [new.to_json()]}, indent=1, sort_keys=True) + "\n")
    return 0


def merge(new_path: str) -> int:
    lib = load_library()
    d, cals = _shipped()
    (new,) = [Calibration.from_json(rec, new_path) for rec in json.loads(Path(new_path).read_text())["entries"]]
    pids = _store_probes(lib)
    out = []
    for cal in cals:
        if cal.dtype == DTYPE:
            assert new.gpu == cal.gpu and new.library == cal.library, (new.key, cal.key)
            cal.probes.update({pid: new.probes[pid] for pid in pids})
            cal.meta["stores_measured"] = new.meta.get("written")
            print(f"{cal.dtype}: {len(pids)} store probes replaced")
        out.append(cal.to_json())
    d["entries"] = out
    (SHIPPED / "H100.json").write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("measure", "merge"):
        sys.exit(__doc__)
    sys.exit(measure(sys.argv[2]) if sys.argv[1] == "measure" else merge(sys.argv[2]))
