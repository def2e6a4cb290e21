"""Where does the one-pass ATAX strip kernel lose time at n = 4096 / 8192?  Hand edits of the
generated source, every result checked against float64 first:

- base:     the kernel kfuse generates (top strip plans of the model, unroll 1);
- vred:     the column results added with 16-byte vector reductions (red.global.add.v4.f32,
            sm_90) instead of four scalar atomics (float32 only);
- prefetch: the next strip's rows loaded into a second register set before this strip's
            reduction and barrier (software pipelining of the serial loop);
- both.

Beside them: the same A read by cupy.sum (a floor for one read of A at this size) and
torch.mv (cuBLAS gemv, one read of A).

    PYTHONPATH=src python3 docs/experiments/strip_pipeline.py
"""
import re
import sys
from pathlib import Path

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.runtime.gpu import cupy

ROOT = Path(__file__).resolve().parents[2]
CASES = [("float32", 4096), ("float32", 8192), ("float64", 4096), ("float64", 8192), ("float32", 16384)]
TOP = 4

VRED = r'''
KF_DEVICE void kf_add4(const KfVec& g, long long e, real a, real b, real c, real d) {
#if __CUDA_ARCH__ >= 900
    if (sizeof(real) == 4 && g.quad_ok(e)) {
        asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
                     :: "l"(g.p + e), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
        return;
    }
#endif
    g.add(e, a); g.add(e + 1, b); g.add(e + 2, c); g.add(e + 3, d);
}
'''

LOAD = re.compile(r"        // c0_gemv: t = gemv\(A, x\) -- load_A\n        \{\n"
                  r"            const KfIx rix\{(\w+), (\w+), ix_u0\.i, ix_u0\.j\};\n"
                  r"            (stile_load<[^>]*>)\(rix, g_A, e_A\);\n        \}\n")


def vred(src: str) -> str:
    src = src.replace("// ---- library routines used by the kernels", VRED + "// ---- library routines used by the kernels", 1)
    old = "for (int e = 0; e < 4; ++e) g.add(ix.j * NC + 4 * t + 4 * T * m + e, v(4 * m + e));"
    assert old in src
    new = ("kf_add4(g, ix.j * NC + 4 * t + 4 * T * m, v(4 * m), v(4 * m + 1), v(4 * m + 2), v(4 * m + 3));")
    return src.replace(old, new).replace("#pragma unroll\n        kf_add4", "        kf_add4")


def prefetch(src: str) -> str:
    m = LOAD.search(src)
    assert m, "load_A block not found"
    tx, ty, fn = m.groups()
    na = re.search(r"KfReg<(\d+)> e_A;", src).group(1)
    src = src[:m.start()] + src[m.end():]
    head = "    for (int it = 0; it < iters; ++it) {\n"
    assert src.count(head) == 1
    src = src.replace(head, f"    KfReg<{na}> e_An;   // the next strip's rows\n"
                      f"    if (first_i < n_i) {{ const KfIx rix{{{tx}, {ty}, first_i, ix.j}}; {fn}(rix, g_A, e_A); }}\n"
                      + head)
    step = "        KfIx ix_u0 = ix; ix_u0.i = first_i + it * kf_groups;\n"
    assert src.count(step) == 1
    src = src.replace(step, step + f"        if (first_i + (it + 1) * kf_groups < n_i) {{ const KfIx rix{{{tx}, {ty}, "
                      f"first_i + (it + 1) * kf_groups, ix_u0.j}}; {fn}(rix, g_A, e_An); }}\n")
    tail = "    }\n    kf_wait_prior();"
    assert src.count(tail) == 1
    return src.replace(tail, "        e_A = e_An;\n" + tail)


def main():
    cp = cupy()
    import torch
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)
    for dt, n in CASES:
        rs = np.random.default_rng(n)
        A = cp.asarray(rs.standard_normal((n, n)), dtype=dt)
        x = cp.asarray(rs.standard_normal(n), dtype=dt)
        ref = A.astype(cp.float64).T @ (A.astype(cp.float64) @ x.astype(cp.float64))
        limit = A.nbytes / bw / 1e3
        t_sum = timer(lambda: cp.sum(A))[1]
        At, xt = torch.as_tensor(A, device="cuda"), torch.as_tensor(x, device="cuda")
        t_mv = timer(lambda: torch.mv(At, xt))[1]
        print(f"{dt} n={n}: one-pass limit {limit:.1f} us; cupy.sum(A) {t_sum:.1f} ({t_sum / limit:.2f}x); "
              f"torch.mv {t_mv:.1f} ({t_mv / limit:.2f}x)", flush=True)
        prog = kfuse.compile(ROOT / "examples" / "atax.kf", dtype=dt, tuned=False, sizes={"n": n})
        shown = 0
        for plan in prog.search.plans():
            if shown == TOP:
                break
            if len(plan.kernels) != 1:
                continue
            p = prog.with_plan(plan)
            base = p.own_source
            if "stile_load" not in base or "ix_u1" in base:
                continue
            shown += 1
            try:
                pre = prefetch(base)
            except AssertionError:   # another loop shape (no serial loop along i)
                pre = None
            forms = {"base": base, "prefetch": pre}
            if dt == "float32":
                forms["vred"] = vred(base)
                forms["both"] = pre and vred(pre)
            row = []
            for name, src in forms.items():
                if src is None:
                    continue
                q = prog.with_plan(plan)
                q.share_source(src)
                out = {"y": cp.full(n, cp.nan, dtype=dt)}
                try:
                    bound = q.bind(A=A, x=x, out=out)
                    bound()
                    cp.cuda.Device().synchronize()
                except Exception as e:   # noqa: BLE001 - an experiment: report and go on
                    row.append(f"{name} failed: {str(e).splitlines()[0][:80]}")
                    continue
                err = float(cp.linalg.norm(out["y"] - ref) / cp.linalg.norm(ref))
                bad = err > (1e-5 if dt == "float32" else 1e-12)
                t = timer(bound)[1]
                row.append(f"{name} {t:6.1f} ({t / limit:.2f}x){' WRONG %.1e' % err if bad else ''}")
            macros = re.findall(r"\[gemv/strip\[([^\]]*)\]", plan.describe())
            print(f"  strip {macros[0] if macros else '?'}, predicted {plan.predicted * 1e6:.1f} us: "
                  + "; ".join(row), flush=True)
        del A, x, At, xt
        cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__" and "--gemv" not in sys.argv:
    sys.exit(main())


GEMV = """matrix A[n, n];
vector x[n], t[n];
input A, x;
t = gemv(A, x);
return t;
"""


def standalone_gemv():
    """``t = gemv(A, x)`` alone: the best strip plans (allowed here by a patched variant filter;
    the planner offers strips only where a fusion uses the reduction's result) against the best
    plans the planner offers, and torch.mv."""
    from kfuse.fusion import space
    cp = cupy()
    import torch
    timer = device_timer(reps=30, warmup=3)
    bw = copy_bandwidth(2**30, timer)
    print(f"standalone gemv; copy bandwidth: {bw:.0f} GB/s", flush=True)
    original = space.whole_choice
    for dt, n in [("float32", 4096), ("float32", 8192), ("float32", 16384), ("float64", 8192), ("float64", 16384)]:
        rs = np.random.default_rng(n + 1)
        A = cp.asarray(rs.standard_normal((n, n)), dtype=dt)
        x = cp.asarray(rs.standard_normal(n), dtype=dt)
        ref = A.astype(cp.float64) @ x.astype(cp.float64)
        limit = A.nbytes / bw / 1e3
        At, xt = torch.as_tensor(A, device="cuda"), torch.as_tensor(x, device="cuda")
        t_mv = timer(lambda: torch.mv(At, xt))[1]
        print(f"{dt} n={n}: limit {limit:.1f} us; torch.mv {t_mv:.1f} ({t_mv / limit:.3f}x)", flush=True)
        for allow in (False, True):
            space.whole_choice = (lambda *a: (lambda order, variants: True)) if allow else original
            try:
                prog = kfuse.compile(GEMV, dtype=dt, tuned=False, sizes={"n": n})
            finally:
                space.whole_choice = original
            shown = 0
            for plan in prog.search.plans():
                d = plan.describe()
                if allow != ("strip" in d):
                    continue
                shown += 1
                if shown > 6:
                    break
                q = prog.with_plan(plan)
                out = {"t": cp.full(n, cp.nan, dtype=dt)}
                try:
                    bound = q.bind(A=A, x=x, out=out)
                    bound()
                    cp.cuda.Device().synchronize()
                except Exception as e:   # noqa: BLE001 - an experiment: report and go on
                    print(f"   failed: {str(e).splitlines()[0][:100]}", flush=True)
                    continue
                err = float(cp.linalg.norm(out["t"] - ref) / cp.linalg.norm(ref))
                bad = err > (1e-5 if dt == "float32" else 1e-12)
                t = timer(bound)[1]
                var = re.findall(r"\[(gemv/[^\]]*\]?)\]", d)
                print(f"   {t:6.1f} us ({t / limit:.3f}x) predicted {plan.predicted * 1e6:6.1f}"
                      f"{' WRONG %.1e' % err if bad else ''}  {var[0] if var else d.splitlines()[1]}", flush=True)
        del A, x, At, xt
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__" and "--gemv" in sys.argv:
    standalone_gemv()
