"""The text of a merged kernel -- a loop step's consecutive one-block kernels as phases of one
block (``runtime/merged.py`` decides which and launches it) -- and of the wrapper that launches
a step's first kernel early (``head_text``).  The program's kernels are rendered as device
functions around them (``codegen/emit.render_device``, through ``Artifact.persistent_source``)::

    kf_merged<r>(kf_merged<r>_args s)           # one block of the widest kernel's threads
        for each kernel K of the run:          # a phase; a narrower kernel: several of its blocks
            K_dev(s.K's arguments, b, g, ...)  # side by side (b: the thread's group), or its warps
            __syncthreads()
        [copies, scalar arithmetic; __syncthreads(); the fori counter, the next step's clears]

Run in one block, a phase reads what the phase before it wrote after ``__syncthreads``.  Each
phase's sizes, counts and serial iterations fixed for the loop instance are compiled in
(``MergedShape.sizes``): its loop bounds, unrolled copies and bounds checks fold away.  The
argument struct is laid out as the host's (``ir/loop.merged_layout``)."""
from __future__ import annotations

import ctypes

from ...ir.loop import Kernel, MergedShape, args_struct, kernel_args, merged_layout
from .cexpr import c_expr, c_shared
from .persistent import struct_members


def kernel_text(shape: MergedShape, dtype, name: str) -> str:
    """The merged kernel ``name``'s text: its argument struct and the kernel."""
    struct = args_struct(shape, dtype, f"{name}_args")
    T = shape.threads
    # the texts name runtime/merged.py and control.py, where they were written before issue 59:
    # kept, so that the generated modules (and the compile caches keyed by them) stay the same
    lines = [f"// ---- {', '.join(k.name for k in shape.kernels)} of a loop step as one block's phases "
             "(runtime/merged.py)",
             f"struct {name}_args {{"]
    lines += struct_members(merged_layout(shape, dtype))
    smem = max([k.smem for k in shape.kernels] + [1])
    lines += ["};",
              f'static_assert(sizeof({name}_args) == {ctypes.sizeof(struct)}, "{name}_args: laid out as the host\'s");',
              f'extern "C" __global__ void __launch_bounds__({T}) {name}(const __grid_constant__ {name}_args s)',
              "{",
              f"    __shared__ __align__(16) real kf_smem[{smem}];",
              "    const long long t = threadIdx.x, all = blockDim.x;",
              "    (void)t; (void)all;"]
    if shape.allow:
        lines.append("    kf_allow_next();   // the next step's first kernel may launch now: it waits for this one")
    for k, (kern, g) in enumerate(zip(shape.kernels, shape.grids)):
        G = shape.side_by_side(k)
        fewer = kern.threads * G < T
        lines.append(f"    // phase {k}: {kern.name}" + (f", {G} of its blocks side by side" if G > 1 else "")
                     + (f", {kern.threads * G} of the block's threads" if fewer else ""))
        guard = f"if (threadIdx.x < {kern.threads * G}) " if fewer else ""
        arg = f"s.k{k}"
        if shape.sizes and shape.sizes[k]:
            lines.append("    {   // its sizes and counts, fixed for the loop, compiled in")
            lines += _fixed_copy(kern, shape.sizes[k], f"s.k{k}", f"kf_k{k}")
            arg = f"kf_k{k}"
        if G > 1:
            lines.append(f"    {guard}{kern.name}_dev({arg}, threadIdx.x / {kern.threads}, {G}, kf_smem);")
        elif g == 1:
            lines.append(f"    {guard}{kern.name}_dev({arg}, 0, 1, kf_smem);")
        else:
            lines.append(f"    {guard}for (long long b = 0; b < {g}; ++b) {{")
            lines.append(f"        {kern.name}_dev({arg}, b, {g}, kf_smem);")
            if kern.smem:
                lines.append(f"        kf_bar_sync({kern.threads});   // the shared memory is the next block's")
            lines.append("    }")
        if arg != f"s.k{k}":
            lines.append("    }")
        lines.append("    __syncthreads();   // what this phase wrote is seen by the next")
    if shape.copies or shape.tails:
        lines.append("    // the step's tail: state entries passed on, returned scalar arithmetic")
        lines += [f"    for (long long e = t; e < s.cpn{i}; e += all) ((real*)s.cpd{i})[e] = ((const real*)s.cps{i})[e];"
                  for i in range(shape.copies)]
        if shape.tails:
            decls, texts = c_shared(shape.tails)
            lines.append("    if (t == 0) {")
            lines += [f"        const real* p{k} = s.r{k};" for k in range(shape.tail_reads)
                      if any(f"(*p{k})" in x for x in texts + decls)]
            lines += [f"        {d}" for d in decls]
            lines += [f"        *(real*)s.o{k} = (real)({x});" for k, x in enumerate(texts)]
            lines.append("    }")
        if shape.indexed or shape.clears or shape.pred is not None:
            lines.append("    __syncthreads();   // what comes next after every read and write above")
    if shape.indexed:
        lines.append("    if (t == 0) *s.idx += (real)1;   // the fori counter")
    if shape.clears:
        lines.append("    // the next step's reduced outputs set to their identities")
        lines += [f"    for (long long e = t; e < s.cn{i}; e += all) ((real*)s.c{i})[e] = s.cv{i};"
                  for i in range(shape.clears)]
    if shape.pred is not None:
        cond = c_expr(shape.pred)
        lines += ["    {   // the while loop's step end (control.py's kf_loop_next): count the step, save the",
                  "        // state it made and say whether the loop goes on; the flag read and the one written differ",
                  "        const int was = s.ctl[1 + s.odd];"]
        if shape.saved:
            lines.append("        if (was) {")
            lines += [f"            for (long long e = t; e < s.svn{i}; e += all) ((real*)s.svd{i})[e] = ((const real*)s.svs{i})[e];"
                      for i in range(shape.saved)]
            lines.append("        }")
        lines += ["        if (t == 0) {"]
        lines += [f"            const real* p{k} = s.q{k};" for k in range(shape.pred_reads) if f"(*p{k})" in cond]
        if shape.consts:
            lines.append("            const real* cst = s.cst;")
        lines += ["            int go = 0;",
                  "            if (was) {",
                  f"                const int holds = {cond};",
                  "                const int k = s.ctl[0] + 1;",
                  "                s.ctl[0] = k;",
                  "                s.ctl[4] = holds;",
                  "                go = k < s.ctl[3] && holds;",
                  "            }",
                  "            s.ctl[2 - s.odd] = go;",
                  "        }",
                  "    }"]
    lines += ["}", ""]
    return "\n".join(lines)


def _fixed_copy(kern: Kernel, sizes, src: str, name: str) -> list[str]:
    """C lines declaring ``name``, a copy of the argument struct ``src`` with ``sizes`` (``fixed``)
    set by offset (the host's struct: ``kernel_args``)."""
    S = kernel_args(0, kern)
    lines = [f"    {kern.name}_args {name} = {src};"]
    for i, v in sizes:
        c = "long long" if kern.args[i] is ctypes.c_longlong else "int"
        lines.append(f"    *({c}*)((char*)&{name} + {getattr(S, f'a{i}').offset}) = {int(v)}{'LL' if c == 'long long' else ''};")
    return lines


def head_text(kern: Kernel, sizes, name: str) -> str:
    """The kernel ``name``: a loop step's first kernel (``kern``, rendered as a device function)
    with its sizes compiled in, which waits for the launch before it before anything else.

    Why: the step's first kernel reads what the step before wrote, and the program's code reads
    its inputs before any wait (in a call they are written before its first kernel).  Waiting at
    the start, it can be launched early (PDL) after the step before, its blocks placed on the GPU
    while that step's last kernel still runs, instead of after it has drained."""
    S = kernel_args(0, kern)
    lines = [f"// ---- {kern.name}, a loop step's first kernel, launched early (runtime/merged.py)",
             f'static_assert(sizeof({kern.name}_args) == {ctypes.sizeof(S)}, "{kern.name}_args: laid out as the host\'s");',
             f'extern "C" __global__ void __launch_bounds__({kern.threads}) {name}(const __grid_constant__ {kern.name}_args s)',
             "{",
             f"    __shared__ __align__(16) real kf_smem[{max(kern.smem, 1)}];",
             "    kf_wait_prior();   // the step before has finished, its writes visible"]
    lines += _fixed_copy(kern, sizes, "s", "kf_k")
    lines += [f"    {kern.name}_dev(kf_k, blockIdx.x, gridDim.x, kf_smem);", "}", ""]
    return "\n".join(lines)


__all__ = ["head_text", "kernel_text"]
