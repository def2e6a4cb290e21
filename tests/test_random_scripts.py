"""Random scripts (frontend/random_scripts.py) and the planner at scale, on the CPU: every
generated script parses, plans (exhaustively or bounded) and builds, the modules compile with
nvcc; long scripts get a valid plan with a notice of the bounded search; reachability as bit sets
agrees with a walk of the graph."""
import random
import time

import pytest

import kfuse
from kfuse.codegen.module import module_source
from kfuse.frontend import parse_script
from kfuse.frontend.random_scripts import random_script
from kfuse.ir.graph import DependencyGraph

from fusion_util import renamed
from test_nvcc import nvcc_compile

SEEDS = range(120)


def plan_is_valid(prog):
    """Every call in exactly one kernel; each kernel's calls after the calls they depend on."""
    plan = prog.plan
    seen = [kc.call.index for k in plan.kernels for kc in k.calls]
    assert sorted(seen) == list(range(len(prog.program.calls)))
    done = set()
    graph = DependencyGraph(prog.program)
    for k in plan.kernels:
        inside = {kc.call.index for kc in k.calls}
        for kc in k.calls:
            assert graph.preds[kc.call.index] <= done | inside
        done |= inside


def test_generator_is_seeded_and_varied(lib):
    a, b = random_script(lib, 7), random_script(lib, 7)
    assert a == b
    texts = {random_script(lib, s).text for s in SEEDS}
    assert len(texts) == len(SEEDS)
    joined = "".join(texts)
    for feature in ("gemv(", "gemtv(", "dot(", "axpy(", "= scal(-", "0.5", "matrix"):
        assert feature in joined, feature
    assert any(random_script(lib, s).matrix is False for s in SEEDS)
    calls = [random_script(lib, s).calls for s in SEEDS]
    assert min(calls) == 2 and max(calls) == 10
    assert random_script(lib, 3, calls=40).calls == 40


@pytest.mark.slow
def test_every_seed_parses_plans_and_builds(lib, nvcc, tmp_path):
    """Each generated script plans; the plans' kernels (renamed apart) compile with nvcc in a few
    modules, both dtypes."""
    for dtype in ("float32", "float64"):
        batch = []
        for s in SEEDS:
            text = random_script(lib, s).text
            prog = kfuse.compile(text, dtype=dtype, calibration=False, tuned=False)
            plan_is_valid(prog)
            if s % 5 == 0:        # every fifth script's kernels go into the modules compiled by nvcc
                batch.append(prog.with_plan(renamed(prog.plan, f"r{s}")))
        for n in range(0, len(batch), 25):
            progs = batch[n:n + 25]
            source = module_source([k for p in progs for k in p.kernels], progs[0].library, dtype,
                                   title="random scripts")
            nvcc_compile(nvcc, source, tmp_path, f"random_{dtype}_{n}")


@pytest.mark.parametrize("kind", ["chain", "wide", "matrix", "random"])
def test_long_scripts_get_a_bounded_plan(lib, kind):
    n = 60
    if kind == "chain":
        text = ("scalar a; vector x, " + ", ".join(f"v{i}" for i in range(n + 1)) + "; input a, x, v0;\n"
                + "\n".join(f"v{i + 1} = axpy(a, v{i}, x);" for i in range(n)) + f"\nreturn v{n};")
    elif kind == "wide":
        text = ("scalar a; vector x, z, " + ", ".join(f"y{i}" for i in range(n)) + "; input a, x, z;\n"
                + "\n".join(f"y{i} = axpy(a, x, z);" for i in range(n)) + "\nreturn "
                + ", ".join(f"y{i}" for i in range(n)) + ";")
    elif kind == "matrix":
        text = ("matrix A; vector " + ", ".join(f"v{i}" for i in range(n + 1)) + "; input A, v0;\n"
                + "\n".join(f"v{i + 1} = {'gemv' if i % 2 == 0 else 'gemtv'}(A, v{i});" for i in range(n))
                + f"\nreturn v{n};")
    else:
        text = random_script(lib, 11, calls=n).text
    t0 = time.perf_counter()
    prog = kfuse.compile(text, calibration=False, tuned=False)
    print(f"{kind}: {n} calls planned in {time.perf_counter() - t0:.2f} s, {len(prog.kernels)} kernel(s)")
    plan_is_valid(prog)
    assert prog.search.space.bounded is not None
    assert "search: bounded search" in prog.search.explain()
    if kind in ("chain", "wide"):
        assert len(prog.kernels) < n            # calls were fused


def test_small_scripts_are_searched_exhaustively():
    for path in sorted(__import__("conftest").EXAMPLES):
        prog = kfuse.compile(path, calibration=False, tuned=False)
        assert prog.search.space.bounded is None, path.stem


def test_reachability_bitsets_agree_with_a_walk(lib):
    rng = random.Random(0)
    for s in range(30):
        prog = parse_script(random_script(lib, s, calls=rng.randint(2, 30)).text, lib)
        g = DependencyGraph(prog)
        n = len(prog.calls)
        for a in range(n):
            stack, seen = [a], set()
            while stack:
                for x in g.succs[stack.pop()]:
                    if x not in seen:
                        seen.add(x)
                        stack.append(x)
            assert {b for b in range(n) if g.reaches(a, b)} == seen


EXTRA_KINDS = [frozenset(k) for k in ({"ew"}, {"arith"}, {"csr"}, {"grid"}, {"ew", "arith", "csr", "grid"})]


def test_extras_leave_the_seeds_scripts_alone(lib):
    """``extras`` left out, a seed's script is the one it was (tests and published results name
    seeds); with extras, the scripts hold statements of each kind."""
    assert random_script(lib, 7, extras=frozenset()) == random_script(lib, 7)
    joined = "".join(random_script(lib, s, extras=k).text for s in range(40) for k in EXTRA_KINDS)
    for feature in ("spmv(", "csr ", "lap", "mean(", "sigmoid(", "[:, None]", "sqrt(", "return"):
        assert feature in joined, feature
    with pytest.raises(ValueError, match="unknown extras"):
        random_script(lib, 1, extras=frozenset({"rect"}))


@pytest.mark.slow
@pytest.mark.parametrize("extras", EXTRA_KINDS, ids=lambda k: "+".join(sorted(k)))
def test_scripts_with_extras_plan_and_build(lib, nvcc, tmp_path, extras):
    """Scripts with elementwise expressions, scalar arithmetic, sparse mat-vecs and stencils plan
    (valid plans, both dtypes, sizes 1, 33 and 4097 among them) and build; every tenth builds with nvcc."""
    batch = []
    for s in range(30):
        text = random_script(lib, s, extras=extras).text
        sizes = {d.name: (1, 33, 4097)[s % 3] for d in parse_script(text, lib).dims}
        for dtype in ("float32", "float64"):
            prog = kfuse.compile(text, dtype=dtype, sizes=sizes, calibration=False, tuned=False)
            plan_is_valid(prog)
            if s % 10 == 0 and dtype == "float64":
                batch.append(prog.with_plan(renamed(prog.plan, f"x{s}")))
    source = module_source([k for p in batch for k in p.kernels], batch[0].library, "float64", title="extras")
    nvcc_compile(nvcc, source, tmp_path, "extras")
