"""A gemv over thread-block clusters where a wide tile fits too (issue 17, float64 at n = 16384):
the planner keeps cluster implementations only where nothing without one fits (fusion/plans.py,
``PlanSearch._rank``), so a float64 gemv whose rows are too long for one block's strip runs the
`wide` variant (699.5 us at 16384 against cuBLAS's 690.5; `cg-step-large-H100.txt`).  This ranks
the cluster implementations as well (that filter lifted, here only) and times the best few beside
the first choice, cupy's A @ p and one read of A at the copy bandwidth, for a lone gemv (CG's
step adds the same three small kernels to either); every plan checked first against A @ p in
float64 on the GPU (cold L2, CUDA events).

    PYTHONPATH=src python3 docs/experiments/cluster_gemv.py [--cases float64:16384 ...] [--top 6]
"""
import argparse

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.fusion import plans as planning
from kfuse.fusion import space

from strip_wide_pricing import CG, GEMV  # noqa: F401  (CG: cluster_plans(CG, ...) by hand)


def _rank_with_clusters(self, impls):
    fitting = [(impl, code) for impl, code in impls if self._fits(code) is None]
    scored = [(self._score(code), impl, code) for impl, code in fitting]
    return planning.sorted_lazily(scored, [lambda t: t[0], lambda t: t[1].unroll > self._iterations(t[2]),
                                            lambda t: planning.preference(t[1], t[2], self.itemsize)])


def sized(text, dt, n):
    base = kfuse.compile(text, dtype=dt, tuned=False)
    return base.for_sizes({d.id: d.literal or n for d in base.program.dims})


def _whole_choice_with_clusters(program, graph, calls):
    """space.whole_choice, clusters allowed outside one pass too (matrix calls all on strips)."""
    plain = _WHOLE_CHOICE(program, graph, calls)

    def keep(order, variants):
        chosen = [program.calls[i].function.variants[v] for i, v in zip(order, variants)]
        if any(v.cluster for v in chosen) and all(v.whole for v in chosen):
            return True
        return plain(order, variants)
    return keep


_WHOLE_CHOICE = space.whole_choice


def cluster_plans(text, dt, n, top):
    """The first `top` plans whose gemv runs over a cluster, with clusters ranked beside the rest."""
    keep = planning.PlanSearch._rank
    planning.PlanSearch._rank = _rank_with_clusters
    space.whole_choice = _whole_choice_with_clusters
    try:
        prog = sized(text, dt, n)
        out = []
        for plan in prog.search.plans():
            if any(k.cluster[0] > 1 for k in plan.kernels):
                out.append(plan)
            if len(out) == top:
                break
        return prog, out
    finally:
        planning.PlanSearch._rank = keep
        space.whole_choice = _WHOLE_CHOICE


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["float64:16384", "float64:12289", "float64:24576",
                                                  "float32:32768"])
    ap.add_argument("--top", type=int, default=6)
    args = ap.parse_args()
    import cupy as cp
    timer = device_timer(reps=20, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for case in args.cases:
        dt, n = case.split(":")
        n = int(n)
        A = cp.random.default_rng(0).standard_normal((n, n), dtype=dt)
        p = cp.random.default_rng(1).standard_normal(n, dtype=dt)
        ref = A.astype(cp.float64) @ p.astype(cp.float64)
        t_cupy = timer(lambda: A @ p)[1]
        print(f"{dt} n={n}: one read of A {A.nbytes / bw / 1e3:.1f} us, cupy A @ p {t_cupy:.1f} us", flush=True)
        first = sized(GEMV, dt, n)
        _, plans = cluster_plans(GEMV, dt, n, args.top)
        for rank, plan in enumerate([first.plan] + plans):
            prog = first.with_plan(plan)
            q = cp.full(n, cp.nan, dtype=dt)
            bound = prog.bind(out={"q": q}, A=A, p=p)
            bound(sync=True)
            err = float(cp.linalg.norm(q.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            assert err < (1e-5 if dt == "float32" else 1e-12), (plan.summary(), err)
            t = timer(bound)[1]
            what = "first choice" if rank == 0 else f"cluster {rank - 1}"
            print(f"  {what}: {t:.1f} us ({t / t_cupy:.3f}x cupy; error {err:.1e}, predicted "
                  f"{plan.predicted * 1e6:.1f}): {plan.summary()}", flush=True)
            prog.release()
        del A, p, ref
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
