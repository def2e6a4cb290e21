"""Try cache hints of the 16-byte accesses on the BLAS-1 examples (patched module text, same plans)."""
from pathlib import Path

import cupy as cp
import numpy as np

import kfuse
from kfuse.reference import random_inputs
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parent.parent
PATCHES = {
    "as is": [],
    "ldg loads": [("*reinterpret_cast<const float4*>(p)", "__ldg(reinterpret_cast<const float4*>(p))")],
    "ldg + st.cs": [("*reinterpret_cast<const float4*>(p)", "__ldg(reinterpret_cast<const float4*>(p))"),
                    ("st.global.v4.f32", "st.global.cs.v4.f32")],
    "ldg + st.cs, no clobber": [("*reinterpret_cast<const float4*>(p)", "__ldg(reinterpret_cast<const float4*>(p))"),
                                ("st.global.v4.f32", "st.global.cs.v4.f32"),
                                ('"f"(v[3]) : "memory");', '"f"(v[3]));')],
    "ld.cs loads": [("const float4 t = *reinterpret_cast<const float4*>(p);",
                     "float4 t; asm volatile(\"ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];\" : \"=f\"(t.x), "
                     "\"=f\"(t.y), \"=f\"(t.z), \"=f\"(t.w) : \"l\"(p));")],
}


def main():
    for name in ("sscal", "vadd", "waxpby", "axpydot"):
        base = kfuse.compile(ROOT / "examples" / f"{name}.kf", tuned=False)
        p = base.program
        dims = {d.id: 2**26 for d in p.dims}
        host = random_inputs(p, dims, 0)
        dev = {k: (cp.asarray(v, dtype=np.float32) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        for label, subs in PATCHES.items():
            src = base.cuda_source
            for a, b in subs:
                assert a in src, (label, a)
                src = src.replace(a, b)
            prog = base.with_plan(base.plan)
            prog.__dict__["cuda_source"] = src
            t = median_us(prog.bind(**dev), reps=50)
            print(f"{name:8s} {label:26s} {t:8.1f} us", flush=True)


if __name__ == "__main__":
    main()
