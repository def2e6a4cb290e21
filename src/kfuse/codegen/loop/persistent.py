"""The text of a device loop's persistent kernel (``runtime/persistent.py`` decides its shape and
launches it): every step's kernels run one after the other inside a single cooperative launch,
separated by grid-wide barriers, and a while loop's condition is evaluated on the device between
steps.  The program's kernels are rendered as device functions around it
(``codegen/emit.render_device``, through ``Artifact.persistent_source``)::

    kf_persistent(kf_step s0, kf_step s1, bar, ctl, cst, most)
        while k < most and cond(set k % 2):      # cond: a while loop's predicate, else true
            for each kernel K of the step:       # a phase
                clears placed in this phase
                for each of K's blocks b owned by this block: K_dev(s.K's arguments, b, ...)
                grid barrier
            [tail phase: state copies, scalar arithmetic, the fori counter, clears; barrier]
            k += 1

``kf_step`` holds one step's arguments, laid out as the host's (``ir/loop.step_layout``); ``s0``
reads buffer set 0 and writes set 1, ``s1`` the reverse, so the result of k steps is set k % 2."""
from __future__ import annotations

import ctypes

from ...ir.loop import Layout, Kernel, PersistentShape, step_layout, step_struct
from .cexpr import c_expr

_C_TYPES = {ctypes.c_void_p: "real*", ctypes.c_longlong: "long long", ctypes.c_int: "int",
            ctypes.c_float: "real", ctypes.c_double: "real"}


def struct_members(layout: Layout) -> list[str]:
    """The C members of a host struct laid out by ``layout`` (``ir/loop.py``): a kernel's
    argument block (the struct of its parameters), pointers, sizes and numbers (``ctl``: the
    loop's int control words)."""
    out = []
    for name, t in layout:
        if isinstance(t, Kernel):
            out.append(f"    {t.name}_args {name};")
        else:
            out.append(f"    {'int*' if name == 'ctl' else _C_TYPES[t]} {name};")
    return out


def kernel_text(shape: PersistentShape, dtype) -> str:
    """The persistent kernel's text: the step struct, the grid barrier, a step, the kernel."""
    struct = step_struct(shape, dtype)
    # the text names runtime/persistent.py, where it was written before issue 59: kept, so that
    # the generated modules (and the compile caches keyed by them) stay byte for byte the same
    lines = ["// ---- the persistent kernel: every step's kernels in one launch (runtime/persistent.py)",
             "struct kf_step {   // one step's arguments (s0: set 0 -> set 1; s1: the reverse)"]
    lines += struct_members(step_layout(shape, dtype))
    lines += ["};",
              f'static_assert(sizeof(kf_step) == {ctypes.sizeof(struct)}, "kf_step: laid out as the host\'s");',
              "",
              "// all blocks of the grid meet (they are all resident: a cooperative launch); their writes",
              "// before it are seen by every read after it.  One atomic a block: block 0 adds 2^31 - (blocks - 1),",
              "// the others 1, so the arrivals of one barrier flip bit 31 of bar[0] (cooperative groups' scheme);",
              "// each block waits to see its bit flipped.  Release on arrival, acquire on the wait: no fences.",
              "KF_DEVICE void kf_grid_sync(unsigned* bar) {",
              "    __syncthreads();",
              "    if (threadIdx.x == 0) {",
              "        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;",
              "        unsigned old, now;",
              '        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(bar), "r"(add) : "memory");',
              "        do {",
              '            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar) : "memory");',
              "        } while (((old ^ now) & 0x80000000u) == 0);",
              "    }",
              "    __syncthreads();",
              "}",
              ""]
    most_threads = max(k.threads for k in shape.kernels)
    smem = max([k.smem for k in shape.kernels] + [1])
    lines += ["KF_DEVICE void kf_step_run(const kf_step& s, real* kf_smem, unsigned* kf_bar) {",
              "    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
              "    const long long all = (long long)gridDim.x * blockDim.x;",
              "    (void)t; (void)all;"]
    for ph in range(shape.tail + 2):
        if not shape.has_phase(ph):
            continue
        here = [i for i, (p, _) in enumerate(shape.clears) if p == ph]
        if ph < shape.tail:
            kern = shape.kernels[ph]
            lines.append(f"    // phase {ph}: {kern.name}" + (f", {kern.threads} of the block's threads"
                                                               if kern.threads < most_threads else ""))
        else:
            lines.append(f"    // phase {ph}: " + ("the step's tail" if ph == shape.tail else "clears at the end"))
        lines += [f"    for (long long e = t; e < s.cn{i}; e += all) ((real*)s.c{i})[e] = s.cv{i};"
                  + ("   // the next step's" if shape.clears[i][1] else "   // this step's") for i in here]
        if ph < shape.tail:
            kern = shape.kernels[ph]
            guard = f"if (threadIdx.x < {kern.threads}) " if kern.threads < most_threads else ""
            lines.append(f"    {guard}for (long long b = blockIdx.x; b < s.g{ph}; b += gridDim.x) {{")
            lines.append(f"        {kern.name}_dev(s.k{ph}, b, s.g{ph}, kf_smem);")
            if kern.smem:
                lines.append(f"        kf_bar_sync({kern.threads});   // the shared memory is the next block's")
            lines.append("    }")
        elif ph == shape.tail:
            lines += [f"    for (long long e = t; e < s.cpn{i}; e += all) s.cpd{i}[e] = s.cps{i}[e];"
                      for i in range(shape.copies)]
            if shape.tails or (shape.indexed and not shape.index_late):
                lines.append("    if (t == 0) {")
                exprs = [c_expr(e) for e in shape.tails]
                lines += [f"        const real* p{k} = s.r{k};" for k in range(shape.tail_reads)
                          if any(f"(*p{k})" in x for x in exprs)]
                lines += [f"        *s.o{k} = (real)({x});" for k, x in enumerate(exprs)]
                if shape.indexed and not shape.index_late:
                    lines.append("        *s.idx += (real)1;   // the fori counter")
                lines.append("    }")
        elif shape.indexed and shape.index_late:
            lines.append("    if (t == 0) *s.idx += (real)1;   // the fori counter")
        lines.append("    kf_grid_sync(kf_bar);")
    lines += ["}", ""]
    pred = shape.predicate
    if pred is not None:
        lines.append("KF_DEVICE int kf_holds(const kf_step& s, const real* cst) {   // the while loop's condition")
        cond = c_expr(pred)
        lines += [f"    const real* p{k} = s.q{k};" for k in range(shape.pred_reads) if f"(*p{k})" in cond]
        lines += ["    (void)cst;", f"    return {cond};", "}", ""]
    check = "if (!(holds = kf_holds({s}, cst))) break;" if pred is not None else ""
    lines += [
        "// ctl[0]: the steps made; ctl[4]: whether the condition held at the last check",
        f'extern "C" __global__ void __launch_bounds__({most_threads}, {max(1, min(shape.min_blocks, 2048 // most_threads))})',
        "kf_persistent(const __grid_constant__ kf_step s0, const __grid_constant__ kf_step s1, unsigned* kf_bar,",
        "              int* ctl, const real* cst, long long most)",
        "{",
        f"    __shared__ __align__(16) real kf_smem[{smem}];",
        "    long long k = 0;",
        "    int holds = 1;",
        "    (void)cst;",
        "    while (k < most) {",
        f"        {check.format(s='s0')}",
        "        kf_step_run(s0, kf_smem, kf_bar);",
        "        if (++k >= most) break;",
        f"        {check.format(s='s1')}",
        "        kf_step_run(s1, kf_smem, kf_bar);",
        "        ++k;",
        "    }",
    ]
    if pred is not None:
        lines.append("    if (k >= most) holds = (k & 1) ? kf_holds(s1, cst) : kf_holds(s0, cst);")
    lines += ["    if (blockIdx.x == 0 && threadIdx.x == 0) { ctl[0] = (int)k; ctl[4] = holds; }", "}"]
    return "\n".join(lines)


__all__ = ["kernel_text", "struct_members"]
