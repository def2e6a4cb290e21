"""Every CUDA text a device loop builds, recorded per case, to check that a change to the code that
writes them leaves them byte for byte the same (GPU: the runtime builds a loop's texts only when
it binds the loop to arrays).

The cases: a fori loop of CG on a dense matrix, while loops of CG and BiCGSTAB on dense matrices,
CG on a CSR matrix (a 3-D mesh Laplacian), CG on a 7-point stencil (lap7), a fori loop whose body
reads the counter, passes an entry on and computes one by scalar arithmetic, and the returned
arithmetic of a jitted function and of a script (``ScalarTail``).  Each loop runs in each mode:
``graphs`` (the defaults), ``persistent`` (``KFUSE_LOOP_PERSISTENT=on``), ``chunks`` (while
loops, ``KFUSE_LOOP_WHILE=chunks``: the control module without graph handles) and ``merged8``
(kernels of up to 8 blocks join merged runs, as tests/test_gpu_loops.py sets); each in a process
of its own (the modes are read as kfuse loads), with a fresh ``KFUSE_CACHE_DIR`` (no tuning store
or calibration of the user's) and ``PYTHONHASHSEED=0``.

A text is recorded where it is compiled: the hook replaces ``kfuse.runtime.compiler.load_module``
(and the name wherever a kfuse module imported it), which every loop text goes through, before
and after issue 59 moved the text writers out of the runtime: the control modules
(``control_module``), the persistent kernel's module (``persistent.compile_kernel``), the merged
runs' module with the head wrapper (``merged.build``), the returned arithmetic's module
(``ScalarTail.run``), and the programs' own modules.  Each text is kept whole, with its kind
(control, scalars, persistent, merged, program), whether it was built relocatable, and the order
of the compiles.

    PYTHONPATH=src python benchmarks/loop_text.py record texts.json         # all cases, both dtypes
    PYTHONPATH=src python benchmarks/loop_text.py record t.json --dtypes float32 --cases fori_cg,while_cg
    python benchmarks/loop_text.py compare old.json new.json                # 0: identical, 1: not

To compare two trees, record with each tree's ``src`` on PYTHONPATH (the script itself may come
from either: it reads nothing of kfuse but the hook's entry point, which both have), then compare.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLVERS = ROOT / "examples" / "solvers"
N = 1024                  # dense sizes: a CG step's vector kernels run one block each (merged runs)
MODES = {
    "graphs": {},
    "persistent": {"KFUSE_LOOP_PERSISTENT": "on"},
    "chunks": {"KFUSE_LOOP_WHILE": "chunks"},
    "merged8": {},                      # merged.MAX_GRID = 8, set in the child
}
NORMS = """vector r, b;
scalar rr, bb, tol, ratio;
input r, b, tol;
rr = dot(r, r);
bb = dot(b, b);
ratio = rr / bb;
return sqrt(rr), ratio, rr, sqrt(ratio) - tol;
"""


# -- the cases (run in the child, with a GPU) ----------------------------------------------------------
def _spd(n, rng):
    import numpy as np
    R = rng.standard_normal((n, n))
    return np.eye(n) * 4 + (R + R.T) / np.sqrt(8 * n)


def case_fori_cg(dtype):
    import cupy as cp
    import numpy as np
    import kfuse
    import cg
    rng = np.random.default_rng(1)
    A, b = cp.asarray(_spd(N, rng), dtype=dtype), cp.asarray(rng.standard_normal(N), dtype=dtype)
    x = cp.zeros(N, dtype)
    r, rr, _ = cg.cg_start(A, b, x)

    def body(i, s):
        A, x, r, p, rr = s
        return (A,) + cg.cg_update(A, x, r, p, rr)
    for steps in (5, 6):
        out = kfuse.fori_loop(0, steps, body, (A, x, r, r, rr))
    return float(cp.asnumpy(out[4]))


def case_while_cg(dtype):
    import cupy as cp
    import numpy as np
    import cg
    rng = np.random.default_rng(2)
    A, b = cp.asarray(_spd(N, rng), dtype=dtype), cp.asarray(rng.standard_normal(N), dtype=dtype)
    x, rr, steps = cg.cg(A, b, tol=1e-4, max_iterations=50)
    return steps


def case_while_bicgstab(dtype):
    import cupy as cp
    import numpy as np
    import bicgstab
    rng = np.random.default_rng(3)
    A = np.eye(N) * 4 + rng.standard_normal((N, N)) / np.sqrt(N)
    Ad, bd = cp.asarray(A, dtype=dtype), cp.asarray(rng.standard_normal(N), dtype=dtype)
    x, _, steps = bicgstab.bicgstab(Ad, bd, tol=1e-4, max_iterations=50)
    return steps


def case_while_csr_cg(dtype):
    import cupy as cp
    import cupyx.scipy.sparse as cps
    import numpy as np
    import sparse_cg
    A = sparse_cg.mesh_matrix(12)
    b = np.random.default_rng(4).standard_normal(A.shape[0])
    x, rr, steps = sparse_cg.sparse_cg(cps.csr_matrix(A.astype(dtype)), cp.asarray(b.astype(dtype)), tol=1e-4,
                                       max_iterations=50)
    return steps


def case_while_lap7(dtype):
    import cupy as cp
    import numpy as np
    import poisson_cg
    b = cp.asarray(np.random.default_rng(5).standard_normal((12, 12, 12)), dtype=dtype)
    x, rr, steps = poisson_cg.cg(b, "lap7", tol=1e-4, max_iterations=50)
    return steps


def case_fori_tails(dtype):
    import cupy as cp
    import numpy as np
    import kfuse
    rng = np.random.default_rng(6)

    def body(i, s):
        x, y, c = s
        return y, x + i * y, (x @ y) / 2 + kfuse.sqrt(c * c)
    x, y = cp.asarray(rng.standard_normal(333), dtype=dtype), cp.asarray(rng.standard_normal(333), dtype=dtype)
    out = kfuse.fori_loop(3, 10, body, (x, y, 1.5))
    return float(cp.asnumpy(out[2]))


def case_jit_tail(dtype):
    import cupy as cp
    import numpy as np
    import kfuse
    f = kfuse.jit(lambda r, b: ((r @ r) / (b @ b), kfuse.sqrt(r @ r) - (r @ r) * (r @ r)))
    rng = np.random.default_rng(7)
    r, b = (cp.asarray(rng.standard_normal(500), dtype=dtype) for _ in range(2))
    got = f(r, b)
    return [float(cp.asnumpy(v)) for v in got]


def case_script_tail(dtype):
    import cupy as cp
    import numpy as np
    import kfuse
    prog = kfuse.compile(NORMS, dtype=dtype)
    rng = np.random.default_rng(8)
    r, b = (cp.asarray(rng.standard_normal(700), dtype=dtype) for _ in range(2))
    got = prog(r=r, b=b, tol=0.5)                              # tol by value
    got2 = prog(r=r, b=b, tol=cp.asarray(0.5, dtype=dtype))    # tol by address
    return [float(cp.asnumpy(v)) for v in got + got2]


LOOPS = {"fori_cg": case_fori_cg, "while_cg": case_while_cg, "while_bicgstab": case_while_bicgstab,
         "while_csr_cg": case_while_csr_cg, "while_lap7": case_while_lap7, "fori_tails": case_fori_tails}
TAILS = {"jit_tail": case_jit_tail, "script_tail": case_script_tail}
CASES = {**LOOPS, **TAILS}


def runs(cases, dtypes) -> list[tuple[str, str, str]]:
    """(case, mode, dtype) of every run: a loop in each mode (chunks: while loops only), the
    returned arithmetic once."""
    out = []
    for case in cases:
        modes = ["graphs"] if case in TAILS else [m for m in MODES if m != "chunks" or case.startswith("while")]
        out += [(case, mode, dtype) for mode in modes for dtype in dtypes]
    return out


# -- the child: one case in one mode ---------------------------------------------------------------------
def _kind(source: str) -> str:
    if "kf_persistent(" in source:
        return "persistent"
    if "kf_merged" in source or " kf_head(" in source:
        return "merged"
    if "kf_loop_" in source:
        return "control"
    if "kf_scalars(" in source:
        return "scalars"
    return "program"


def child(case: str, mode: str, dtype: str, out: str) -> None:
    sys.path.insert(0, str(SOLVERS))
    import kfuse  # noqa: F401 - loaded before the hook, so that every module that took the name is found
    import kfuse.runtime.compiler as compiler
    import kfuse.runtime.loop  # noqa: F401
    import kfuse.runtime.merged as merged
    import kfuse.runtime.modules  # noqa: F401
    original = compiler.load_module
    compiles: list = []

    def load_module(source, relocatable=False):
        compiles.append({"kind": _kind(source), "relocatable": bool(relocatable), "source": source})
        return original(source, relocatable=relocatable)
    for name, module in list(sys.modules.items()):
        if name.startswith("kfuse") and getattr(module, "load_module", None) is original:
            setattr(module, "load_module", load_module)
    if mode == "merged8":
        merged.MAX_GRID = 8
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # a loop stopped at its bound warns: not a failure here
        result = CASES[case](dtype)
    Path(out).write_text(json.dumps({"result": result, "compiles": compiles}))


def _run_one(item, cache: str) -> tuple[str, dict]:
    case, mode, dtype = item
    key = f"{case}/{mode}/{dtype}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = {**os.environ, **MODES[mode], "KFUSE_CACHE_DIR": cache, "PYTHONHASHSEED": "0"}
        done = subprocess.run([sys.executable, __file__, "child", case, mode, dtype, str(out)], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0 or not out.is_file():
            return key, {"error": (done.stdout + done.stderr)[-4000:]}
        return key, json.loads(out.read_text())


def record(path: str, cases, dtypes, jobs: int) -> int:
    items = runs(cases, dtypes)
    with tempfile.TemporaryDirectory(prefix="kfuse-loop-text-") as cache:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            got = dict(pool.map(lambda it: _run_one(it, cache), items))
    failed = [k for k, v in got.items() if "error" in v]
    for k in failed:
        print(f"{k}: failed\n{got[k]['error']}", file=sys.stderr)
    import kfuse
    data = {"kfuse": str(Path(kfuse.__file__).resolve().parent), "runs": got}
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True))
    texts = sum(len(v.get("compiles", [])) for v in got.values())
    print(f"{len(got)} runs, {texts} compiles recorded in {path}" + (f"; {len(failed)} failed" if failed else ""))
    return 1 if failed else 0


# -- comparing two records -------------------------------------------------------------------------------
def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compare(old_path: str, new_path: str, program: bool) -> int:
    """List the runs whose texts differ (order aside: the compiles as a set of texts; then their
    order), with a diff of the first differing text of each kind; 0 when all are identical."""
    old, new = (json.loads(Path(p).read_text())["runs"] for p in (old_path, new_path))
    bad = 0
    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            print(f"{key}: only in {'the new' if key in new else 'the old'} record")
            bad += 1
            continue
        a, b = old[key], new[key]
        if "error" in a or "error" in b:
            print(f"{key}: a run failed ({'old' if 'error' in a else 'new'})")
            bad += 1
            continue

        def texts(run):
            return [(c["kind"], c["relocatable"], c["source"]) for c in run["compiles"]
                    if program or c["kind"] != "program"]
        ta, tb = texts(a), texts(b)
        if ta == tb:
            print(f"{key}: identical ({len(ta)} compiles: "
                  f"{', '.join(sorted({k for k, _, _ in ta}))})")
            continue
        bad += 1
        sa, sb = {_digest(t): (k, r, t) for k, r, t in ta}, {_digest(t): (k, r, t) for k, r, t in tb}
        if set(sa) == set(sb):
            print(f"{key}: the same texts, compiled in another order")
            continue
        print(f"{key}: DIFFERENT: {len(set(sa) - set(sb))} old text(s) not made, {len(set(sb) - set(sa))} new one(s)")
        for kind in sorted({sa[d][0] for d in set(sa) - set(sb)} | {sb[d][0] for d in set(sb) - set(sa)}):
            x = next((sa[d][2] for d in sa if d not in sb and sa[d][0] == kind), "")
            y = next((sb[d][2] for d in sb if d not in sa and sb[d][0] == kind), "")
            diff = list(difflib.unified_diff(x.splitlines(), y.splitlines(), "old", "new", lineterm="", n=2))
            print(f"  {kind}:\n    " + "\n    ".join(diff[:40]))
    print("all identical" if not bad else f"{bad} run(s) differ")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="run the cases and write every text they build")
    r.add_argument("path")
    r.add_argument("--cases", default=",".join(CASES), help=f"some of {', '.join(CASES)}")
    r.add_argument("--dtypes", default="float32,float64")
    r.add_argument("--jobs", type=int, default=4, help="runs at a time (each a process of its own)")
    c = sub.add_parser("compare", help="compare two records")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--no-program", action="store_true", help="leave the programs' own modules out")
    h = sub.add_parser("child", help=argparse.SUPPRESS)
    for name in ("case", "mode", "dtype", "out"):
        h.add_argument(name)
    a = p.parse_args(argv)
    if a.command == "child":
        child(a.case, a.mode, a.dtype, a.out)
        return 0
    if a.command == "compare":
        return compare(a.old, a.new, not a.no_program)
    cases = [x for x in a.cases.split(",") if x]
    unknown = [x for x in cases if x not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; the cases: {', '.join(CASES)}")
    return record(a.path, cases, [d for d in a.dtypes.split(",") if d], a.jobs)


if __name__ == "__main__":
    sys.exit(main())
