"""Carry the shipped calibrations (every GPU's file) over to the library as it is now, without a GPU.

A change to the library's metadata or sources changes its digest, and no calibration of the old
digest is used for the new one.  `calibration.measure.carry_over` keeps every routine whose
micro-kernel is unchanged (a probe id hashes the kernel text and the routine's source file):
routines of new or changed micro-kernels are left out (`kfuse calibrate` measures just those).
The entries of each shipped file are replaced by their carried-over copies.

    PYTHONPATH=src python3 docs/experiments/carry_calibration.py
"""
import json
import sys

from kfuse.calibration.measure import carry_over
from kfuse.cost.store import SHIPPED, Calibration
from kfuse.library.loader import load_library


def main() -> int:
    lib = load_library()
    for shipped in sorted(SHIPPED.glob("*.json")):
        d = json.loads(shipped.read_text())
        out = []
        for rec in d["entries"]:
            cal = Calibration.from_json(rec, str(shipped))
            new = carry_over(cal, lib) if cal.library != lib.digest else cal
            print(f"{shipped.name} {cal.dtype}: {cal.library} -> {new.library}: {len(new.routines)} of "
                  f"{len(cal.routines)} routines kept, {len(new.probes)} probes")
            out.append(new.to_json())
        d["entries"] = out
        shipped.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
