"""Synthetic calibrations for CPU tests: every probe of a library with costs from a function."""
from kfuse.calibration.probes import library_probes
from kfuse.cost.store import Calibration

DEVICE = {"sms": 132, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32, "smem_per_sm": 233472,
          "smem_optin": 232448, "smem_reserved": 1024}


def synthetic(lib, cost, dtype="float32", gpu="Synthetic GPU", launch_ns=2000.0, clear_ns=1000.0,
              barrier_ns=None, half=2.0, routines=None, quick=False):
    """cost(routine key or None, probe, env) -> ns per execution; ``half``: slowdown at half
    occupancy.  ``routines`` restricts the keys (None: all)."""
    keys, probes = library_probes(lib)
    by_probe = {}
    for key, pid in keys.items():
        by_probe.setdefault(pid, []).append(key)
    data = {}
    for pid, p in probes.items():
        points = []
        for env in p.environments(quick):
            ns = cost(by_probe[pid], p, env)
            if env.occupancy == "half":
                ns *= half
            points.append({**env.to_json(), "resident": 1.0 if env.occupancy == "full" else 0.5, "ns": ns})
        data[pid] = {"kind": p.kind, "atomic": p.atomic, "nesting": p.nesting, "points": points}
    if routines is not None:
        keys = {k: v for k, v in keys.items() if k in routines}
    return Calibration(gpu, lib.digest, dtype, dict(DEVICE), launch_ns, clear_ns,
                       barrier_ns or {1: {256: 0.0}, 2: {256: 0.0}}, keys, data, {"written": "test", "quick": False})
