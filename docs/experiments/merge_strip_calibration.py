"""Merge the strip routines of a fresh `kfuse calibrate` run into the shipped H100 calibration.

`kfuse calibrate` (reusing the shipped calibration, so only the 270 strip probes of
blas2_strip.cu were timed) also re-measures the launch, clear and barrier terms; this keeps the
shipped ones (so that no plan without strips is priced differently) and adds only what the
shipped file lacks: the strip probes and routines, and barrier points at thread counts it never
measured (1024-thread nested blocks, the strips of BY = 32).

    PYTHONPATH=src python3 docs/experiments/merge_strip_calibration.py NEW.json
"""
import json
import sys
from pathlib import Path

from kfuse.cost.store import SHIPPED, Calibration


def main(new_path: str) -> int:
    shipped = SHIPPED / "H100.json"
    d = json.loads(shipped.read_text())
    fresh = {c["dtype"]: Calibration.from_json(c, new_path) for c in json.loads(Path(new_path).read_text())["entries"]}
    out = []
    for rec in d["entries"]:
        cal = Calibration.from_json(rec, str(shipped))
        new = fresh[cal.dtype]
        assert new.gpu == cal.gpu and new.library == cal.library, (new.key, cal.key)
        added = {k: v for k, v in new.routines.items() if k not in cal.routines}
        cal.routines.update(added)
        cal.probes.update({pid: new.probes[pid] for pid in set(added.values())})
        for nest, points in new.barrier_ns.items():
            for threads, ns in points.items():
                cal.barrier_ns.setdefault(nest, {}).setdefault(threads, ns)
        cal.meta["strips_measured"] = new.meta.get("written")
        print(f"{cal.dtype}: {len(added)} routines added, {len(cal.probes)} probes")
        out.append(cal.to_json())
    d["entries"] = out
    shipped.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
