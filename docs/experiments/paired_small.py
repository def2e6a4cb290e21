"""Do float64 paired stores (kf_store16_paired) cost at small sizes?  In the float64 report at
n = 1024 (vectors of 1024 entries) random2018's first plan, whose BLAS-1 kernel stores three
`quad` vectors, measured 26.3 us against 24.2 before the paired stores (same plan).

Times that plan's program with the prelude as it is and with the pairing cut out (put4 storing as
before), in turns (5 rounds, median of 30 cold-L2 calls each), at the report's sizes and at
n = 8192; then SSCAL alone at N = 2^10 .. 2^26 both ways.

    PYTHONPATH=src python3 docs/experiments/paired_small.py
"""
import numpy as np

import kfuse
from kfuse.bench.harness import examples_dir
from kfuse.frontend.random_scripts import random_script
from kfuse.library.loader import load_library

from explore_util import timed_in_turns

PAIRED = "if (kf_store16_paired(p + e, v, ok)) return;"


def unpaired(source: str) -> str:
    assert PAIRED in source
    return source.replace(PAIRED, "")


def pair_of(text: str, dtype: str, size_of) -> list:
    """The program of the model's first plan, and the same with the pairing cut out."""
    probe = kfuse.compile(text, dtype=dtype, tuned=False, name="s")
    sizes = {d.name: size_of(d) for d in probe.program.dims}
    c = kfuse.compile(text, dtype=dtype, sizes=sizes, tuned=False, name="s")
    plan = c.plan
    a, b = c.with_plan(plan), c.with_plan(plan)
    b.share_source(unpaired(a.cuda_source))
    dims = {d.id: sizes[d.name] for d in c.program.dims}
    print(f"  plan: {plan.summary()}", flush=True)
    return [a, b], dims


def rounds(progs, dims, dtype) -> list[float]:
    return [float(np.median(g)) for g in timed_in_turns(progs, dims, dtype, 5)[1]]


def main() -> None:
    lib = load_library()
    text = random_script(lib, 2018).text
    for label, n, N in (("report small", 1024, 2**20), ("n = 8192", 8192, 2**26)):
        progs, dims = pair_of(text, "float64", lambda d, n=n: n)
        paired, plain = rounds(progs, dims, "float64")
        print(f"random2018 float64 {label}: paired {paired:.2f} us, unpaired {plain:.2f} us", flush=True)
    text = (examples_dir() / "sscal.kf").read_text()
    for k in (10, 14, 17, 20, 23, 26):
        progs, dims = pair_of(text, "float64", lambda d, k=k: 2**k)
        paired, plain = rounds(progs, dims, "float64")
        print(f"SSCAL float64 N = 2^{k}: paired {paired:.2f} us, unpaired {plain:.2f} us", flush=True)


if __name__ == "__main__":
    main()
