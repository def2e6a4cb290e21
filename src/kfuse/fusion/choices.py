"""The choices an implementation of a fusion makes besides its fusion: variants per call (all on
strips or none, clusters only in one pass), macros shared by the calls, loop axes, and the
samples of a bounded search (``space.py`` enumerates their products)."""
from __future__ import annotations

from ..codegen.schedule import ScheduleMemo
from ..ir.graph import DependencyGraph
from ..ir.program import Program
from ..library.schema import AXES
from .legality import one_pass_exchanges

PREFERRED_IPB = (8, 32)     # tried for unnested kernels when the variants allow them


def macro_choices(program: Program, order, variants, nesting: int):
    """(BY values, other macro assignments, instances per block) a variant choice allows."""
    vars_ = [program.calls[i].function.variants[v] for i, v in zip(order, variants)]
    bys = [set(v.macros["BY"]) for v in vars_ if "BY" in v.macros]
    by_choices = sorted(set.intersection(*bys)) if bys else [None]
    if bys and not by_choices:
        by_choices = sorted(set.union(*bys))
    others = sorted({m for v in vars_ for m in v.macros} - {"BY"})
    other_choices = [[(m, x) for x in sorted(set.intersection(*(set(v.macros[m]) for v in vars_
                                                                  if m in v.macros)))]
                     for m in others]
    ipbs = sorted(set.intersection(*(set(v.instances_per_block) for v in vars_)))
    ipb_choices = ([p for p in ipbs if p in PREFERRED_IPB] or ipbs[-1:]) if nesting == 1 else [1]
    return by_choices, other_choices, ipb_choices


def mixed_nesting(program: Program, calls) -> bool:
    """Vector calls beside matrix calls (a kernel of them runs the vector calls on the rows of
    the matrix calls' strips)?"""
    return len({program.calls[i].function.nesting for i in calls}) > 1


def whole_choice(program: Program, graph: DependencyGraph, calls: frozenset[int]):
    """Which variant choices a fusion's implementations consider: where a call uses a reduction
    result made in the same kernel (one pass), only variants spanning an axis whole, for every
    call (they share the strips); elsewhere such variants for every call or for none (a strip
    kernel is also a plain implementation -- a lone gemv on strips reads A at the copy bandwidth
    -- but its calls walk the same strips; whether the rows fit is decided per size, fits_at).
    Variants of thread-block clusters only in one pass: elsewhere an implementation without a
    cluster always fits (and is preferred, fusion/plans.py), and their choices would only crowd
    the build budget of the exhaustive search.  Vector calls beside matrix calls run on the rows
    of the strips (their variants spanning j whole, for every call, with no cluster: such a call
    runs once per strip); vector calls alone never take those variants."""
    one_pass = bool(one_pass_exchanges(program, graph, calls))
    mixed = mixed_nesting(program, calls)
    vectors_only = all(program.calls[i].function.nesting == 1 for i in calls)

    def keep(order, variants) -> bool:
        chosen = [program.calls[i].function.variants[v] for i, v in zip(order, variants)]
        whole = [bool(v.whole) for v in chosen]
        if vectors_only:
            return not any(whole)   # a variant on the rows of strips runs only beside a matrix call
        if (mixed or not one_pass) and any(v.cluster for v in chosen):
            return False    # a plain implementation without a cluster exists at every size
        return all(whole) if (one_pass or mixed) else (all(whole) or not any(whole))
    return keep


def variant_indices(program: Program, order) -> list[list[int]]:
    """Per call, the variants an implementation may give it: a vector call's variants on the rows
    of strips only beside matrix calls, and there only those (``whole_choice`` would refuse the
    rest; leaving them out of the product saves enumerating them); a ``fallback`` variant (row
    bands) only in a kernel of its call alone, so that fusions keep their search budget."""
    mixed = mixed_nesting(program, order)
    out = []
    for i in order:
        fn = program.calls[i].function
        if fn.nesting == 1:
            out.append([v for v, var in enumerate(fn.variants) if bool(var.whole) == mixed])
        else:
            out.append([v for v, var in enumerate(fn.variants) if not (var.fallback and len(order) > 1)])
    return out


def loops_of(program: Program, order, variants, nesting: int) -> tuple[str, ...]:
    """The serial loop axes of a kernel of these variant choices: both of a nested kernel, but the
    axis a thread-block cluster spans (its blocks share their strips, codegen/layout.py), and on
    strips spanning j whole a call summing over i (gemtv's column sums) loops along i: each block
    adds its whole row of partial sums once its loop ends, so a loop along j (one strip per
    instance along it) would add a row per strip -- n x n atomic adds, which the model does not
    price (docs/design.md, 'Loop axis of a gemtv on strips')."""
    if nesting != 2:
        return ("i",)
    chosen = [(program.calls[i], program.calls[i].function.variants[k]) for i, k in zip(order, variants)]
    if any(v.triangle for _, v in chosen):
        return ("i",)       # a kernel on a triangle walks its tiles as one sequence (codegen/emit.py)
    spanned = {v.whole[0] for _, v in chosen if v.cluster}
    if any("j" in v.whole and not v.cluster and _sums_over_i(c) for c, v in chosen):
        spanned.add("j")
    return tuple(a for a in AXES[2] if a not in spanned)


def _sums_over_i(call) -> bool:
    """Does a nested call reduce an output over i (its index leaves i out)?  (A vector call's sum
    on the strips' rows adds once per strip along either loop.)"""
    return call.function.nesting == 2 and any(p.reduce and "i" not in p.index for p in call.function.outputs)


def sampled_variants(program: Program, order, memo: ScheduleMemo | None = None) -> list[tuple[int, ...]]:
    """Variant choices of a bounded search: each call's k-th variant (its last when it has fewer),
    for every k -- calls of one kernel then tend to share a thread-to-data mapping.  Variants of
    thread-block clusters are left out (the rows of long scripts' sizes fit a block's strips), and
    so are ``fallback`` variants (row bands: whether the strips they stand in for fit is known only
    from every strip width, which a bounded search does not build); vector calls take their
    variants on the rows of strips only beside matrix calls.  What they read are the calls'
    functions, in order: with a ``memo`` (one per program) found once per such sequence (the list
    is read, not changed)."""
    if memo is not None:
        fns = [program.calls[i].function for i in order]
        key = ("sampled", tuple(map(id, fns)))
        got = memo.choices.get(key)
        if got is None:
            got = memo.choices[key] = (fns, sampled_variants(program, order))
        return got[1]
    plain = [[v for v in allowed if not (program.calls[i].function.variants[v].cluster
                                         or program.calls[i].function.variants[v].fallback)]
             for i, allowed in zip(order, variant_indices(program, order))]
    if not all(plain):
        return []
    return list(dict.fromkeys(tuple(p[min(k, len(p) - 1)] for p in plain) for k in range(max(map(len, plain)))))


def middle(choices: list) -> list:
    return [choices[len(choices) // 2]] if choices else choices


def strip_widths(program: Program, order, variants, other_choices, dims: dict[int, int]):
    """Of the widths a strip may take (the tile side, named by a macro, of variants spanning an
    axis whole: NC), only those that can fit sizes ``dims``: the narrowest covering the axis --
    ``legality.fits_at`` refuses every wider one, a narrower one covering it -- and the widest
    (whose reasons ``PlanSearch`` gives when none fits); all of them when none covers.  Kernels of
    thread-block clusters keep all (a cluster of narrower strips may cover the axis)."""
    chosen = [program.calls[i].function.variants[v] for i, v in zip(order, variants)]
    first = next((program.calls[i] for i in order if program.calls[i].function.nesting == 2), None)
    if first is None or any(v.cluster for v in chosen):
        return other_choices
    lengths = {v.tile[k]: dims[first.axes[k]] for v in chosen if v.tile is not None
               for k, axis in enumerate(AXES[2]) if axis in v.whole and isinstance(v.tile[k], str)}
    out = []
    for choices in other_choices:
        if choices and choices[0][0] in lengths:
            values = sorted(x for _, x in choices)
            covering = [x for x in values if x >= lengths[choices[0][0]]]
            if covering:
                choices = [(m, x) for m, x in choices if x in (covering[0], values[-1])]
        out.append(choices)
    return out


def variant_choices(program: Program, order, variants, nesting: int, memo: ScheduleMemo | None) -> tuple:
    """(``macro_choices``, ``loops_of``) of a variant choice: what they read are
    the calls' functions and variants, in any order, so with a ``memo`` (one per program) they are
    found once per such choice (a long script's fusions repeat few).  Their lists are read, not
    changed."""
    if memo is None:
        return macro_choices(program, order, variants, nesting), loops_of(program, order, variants, nesting)
    fns = [program.calls[i].function for i in order]
    key = (nesting, tuple(sorted(zip(map(id, fns), variants))))
    got = memo.choices.get(key)
    if got is None:
        got = memo.choices[key] = (fns, (macro_choices(program, order, variants, nesting),
                                         loops_of(program, order, variants, nesting)))
    return got[1]
