"""Calibrated prediction: a kernel's time from the measured costs of its routines.

time(kernel) = max(sum of transfer-routine times + barriers, sum of compute-routine times)
               + contention of atomic partial stores + launch overhead + clears of reduced outputs
time(plan)   = sum over its kernels

A routine's time is its measured cost per execution in the kernel's environment times its
executions: every instance for a routine in the serial loop, every instance slot of every block
for one before or after it (invariant loads, accumulated stores).  Loads and stores are transfer
routines; stores of reduced outputs include their atomic adds (they were measured doing them).
A micro-kernel's atomic stores meet few other blocks' stores to the same addresses; in a real
kernel every block walking the same instances adds to the same outputs at about the same time.
That contention is the transfer model's fitted term (per warp adding an instance's partial
inside the serial loop; docs/design.md, 'The calibrated model'), added outside the max.
Environments not measured exactly are interpolated:

* instances per block: linearly in log2 between the two nearest measured values (clamped);
* unroll: linearly between the two nearest measured values (clamped); a loop unrolled beyond its
  serial iterations (small sizes) is priced at the iterations it runs;
* occupancy: the kernel's resident threads per SM (from its block size and shared memory) against
  the probe's at full and at half occupancy; the slowdown is linear in 1 / occupancy between the
  two measurements (extrapolated below half, none above full).  The loads and stores of a variant
  whose instance has fewer threads than the kernel's count only that variant's threads (the others
  idle while they run; each probe ran in its own variant's instance).
"""
from __future__ import annotations

import itertools
import logging
import math
from dataclasses import replace
from pathlib import Path

from ..codegen.kernel import KernelCode
from ..errors import KfuseError
from ..ir.kernel import KernelSpec, LaunchInfo, target_blocks
from ..library.schema import Library
from ..ir.program import Value
from .store import SHIPPED, Calibration, find, kernel_factor_key, routine_key
from .transfer import DEFAULT_MACHINE, atomic_step_warps
from .transfer import kernel_time as transfer_kernel_time


UNMEASURED = ""             # the probe id of a routine the calibration did not measure (a step's facts)
FACTS_KEPT = 20000          # steps tuples whose facts a model keeps (CalibratedModel._step_facts)


def resident_fraction(device: dict, threads: int, smem_bytes: int) -> float:
    """Fraction of an SM's thread slots filled by blocks of this size and shared memory
    (registers are not known before compilation and are not counted)."""
    blocks = min(device["max_blocks_per_sm"], device["max_threads_per_sm"] // max(1, threads))
    if smem_bytes:
        blocks = min(blocks, device["smem_per_sm"] // (smem_bytes + device["smem_reserved"]))
    return max(1, blocks) * threads / device["max_threads_per_sm"]


def _probe_tables(points: list[dict], loop: str) -> tuple:
    """A probe's points along a loop axis as ``_ipb_table``s: the unrolls measured at full
    occupancy, the time table of each, and (resident fraction at full occupancy and unroll 1, at
    half occupancy, time at full occupancy and unroll 1, at half) or None when the probe was not
    measured at half occupancy (``CalibratedModel._routine_base`` reads them)."""
    same_loop = [p for p in points if p["loop"] == loop] or points
    full = [p for p in same_loop if p["occupancy"] == "full"]
    unrolls = sorted({p["unroll"] for p in full})
    by_unroll = {u: _ipb_table([p for p in full if p["unroll"] == u]) for u in unrolls}
    half = [p for p in same_loop if p["occupancy"] == "half"]
    full1 = [p for p in full if p["unroll"] == min(unrolls)]
    occupancy = ((_ipb_table(full1, "resident"), _ipb_table(half, "resident"), _ipb_table(full1),
                  _ipb_table(half)) if half and full1 else None)
    return unrolls, by_unroll, occupancy


_TABLES: dict[int, tuple[Calibration, dict]] = {}      # id(calibration) -> (it, calibration_tables)


def calibration_tables(cal: Calibration) -> dict[tuple[str, str], tuple]:
    """``_probe_tables`` of every probe along both loop axes, made once per calibration object
    (a file's calibrations are read once per process, cost/store.py, and not changed after):
    what every model of it reads of the probes' points, like the calibration itself a cost
    of the first plan in a process, not of each (about 5 ms for the shipped H100 one)."""
    got = _TABLES.get(id(cal))
    if got is None or got[0] is not cal:
        tables = {}
        for pid, probe in cal.probes.items():
            for loop in ("i", "j"):
                try:
                    tables[(pid, loop)] = _probe_tables(probe["points"], loop)
                except (KeyError, TypeError, ValueError, IndexError):
                    pass        # left to fail where a kernel uses it, as it would unmemoised
        if len(_TABLES) >= 16:
            _TABLES.clear()     # calibrations made on the fly (calibrate, tests) are not kept
        got = _TABLES[id(cal)] = (cal, tables)
    return got[1]


class CalibratedModel:
    """Ranks kernels by a calibration (see the module docstring)."""

    def __init__(self, cal: Calibration):
        self.cal = cal
        self.name = f"calibrated model ({cal.gpu}, {cal.dtype})"
        self._memo: dict[tuple, float] = {}
        self._bases: dict[tuple, tuple[float, tuple[float, float] | None]] = {}   # _routine_base (memo)
        self._tables = calibration_tables(cal)
        self._routine_facts: dict[tuple, tuple] = {}     # routine identity and phase -> _facts_of (memo)
        self._barrier: dict[tuple[int, int], float] = {}   # (nesting, threads) -> ns (memo)
        self._facts: dict[int, tuple[tuple, list[tuple], int]] = {}   # id(steps) -> (steps, _step_facts, its number)
        self._step_fact: dict[int, tuple] = {}      # id(step) -> (step, its fact in _step_facts)
        self._fact_numbers: dict[tuple, int] = {}   # _step_facts' contents -> a number (never reused)
        self._numbers = itertools.count()
        self._parts: dict[tuple, tuple[dict[str, float], float]] = {}   # _found_parts by what it reads (its key)
        self._launches: dict[tuple, tuple] = {}     # _launch_facts (memo)
        self._measured_numbers: dict[int, bool] = {}    # _step_facts' number -> nothing _missing
        self._launch_content: dict[tuple, tuple] = {}   # _launch_facts by what they read (memo)
        self.launch_seconds = cal.launch_ns * 1e-9          # the launch term of every kernel_time
        self.n_cal = int(cal.meta.get("sizes", {}).get("n", 0) or 0)   # the probes' matrix side (0: unknown)
        self.device = cal.device                            # the GPU's multiprocessor facts

    # -- one routine ---------------------------------------------------------------------------
    def routine_ns(self, probe_id: str, loop: str, unroll: int, ipb: int, resident: float) -> float:
        """Nanoseconds per execution of a probe's routine in an environment (interpolated)."""
        key = (probe_id, loop, unroll, ipb, resident)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._routine_ns(*key)
        return got

    def _routine_ns(self, probe_id: str, loop: str, unroll: int, ipb: int, resident: float) -> float:
        base, occupancy = self._routine_base(probe_id, loop, unroll, ipb)
        if occupancy is None:
            return base
        f_full, slope = occupancy
        if resident >= f_full:
            return base
        return base * max(1.0, 1 + slope * (f_full / resident - 1))

    def _routine_base(self, probe_id: str, loop: str, unroll: int, ipb: int) -> tuple[float, tuple[float, float] | None]:
        """What ``_routine_ns`` finds before it looks at the occupancy (memo: every occupancy
        shares it): the time at full occupancy, and the full occupancy's resident fraction and
        the slowdown's slope, or None where the probe has no slowdown to apply."""
        key = (probe_id, loop, unroll, ipb)
        got = self._bases.get(key)
        if got is not None:
            return got
        unrolls, by_unroll, occupancy = self._probe_tables(probe_id, loop)
        lo = max((u for u in unrolls if u <= unroll), default=unrolls[0])
        hi = min((u for u in unrolls if u >= unroll), default=unrolls[-1])
        base = _at_ipb(by_unroll[lo], ipb)
        if hi != lo:                # between two measured unrolls: linear
            t = (unroll - lo) / (hi - lo)
            base += t * (_at_ipb(by_unroll[hi], ipb) - base)
        got = self._bases[key] = (base, None)
        # occupancy: the slowdown measured at unroll 1 (full vs half), applied to this unroll
        if occupancy is None:
            return got
        full1_resident, half_resident, full1_ns, half_ns = occupancy
        f_full = _at_ipb(full1_resident, ipb)
        f_half = _at_ipb(half_resident, ipb)
        if f_half >= f_full:
            return got
        ns_full, ns_half = _at_ipb(full1_ns, ipb), _at_ipb(half_ns, ipb)
        if ns_full <= 0:
            return got
        got = self._bases[key] = (base, (f_full, (ns_half / ns_full - 1) / (f_full / f_half - 1)))
        return got

    def _probe_tables(self, probe_id: str, loop: str) -> tuple:
        got = self._tables.get((probe_id, loop))
        return got if got is not None else _probe_tables(self.cal.probes[probe_id]["points"], loop)

    def barrier_ns(self, nesting: int, threads: int) -> float:
        """Nanoseconds of a local barrier per instance in blocks of ``threads`` (interpolated)."""
        key = (nesting, threads)
        if key not in self._barrier:
            bar = self.cal.barrier_ns.get(nesting, {})
            self._barrier[key] = _along_ipb([{"ipb": t, "ns": v} for t, v in bar.items()], threads) if bar else 0.0
        return self._barrier[key]

    # -- one kernel ----------------------------------------------------------------------------
    def kernel_parts(self, code: KernelCode, dims: dict[int, int], itemsize: int) -> dict[str, float]:
        """Seconds of each term: transfer, compute, barrier, launch, clears.  Found once for all
        kernels that agree in everything it reads (their steps' facts, their launch's facts, unroll,
        instances per block, span, threads and whether they clear): kernels of different fusions
        often do (a long script's fusions of one kind but not one shape)."""
        return dict(self._found_parts(code, dims, itemsize)[0])

    def _found_parts(self, code: KernelCode, dims: dict[int, int], itemsize: int) -> tuple[dict[str, float], float]:
        """(``kernel_parts``, the time they sum to), memoised by what they read."""
        L, spec = code.launch, code.spec
        launch = self._launch_facts(code, dims, itemsize)
        facts, number = self._numbered_step_facts(code.steps)
        key = (number, launch, spec.unroll, spec.ipb, L.span, L.threads, bool(L.clears))
        got = self._parts.get(key)
        if got is None:
            if len(self._parts) >= FACTS_KEPT:
                self._parts.clear()
            p = self._kernel_parts(code, launch, facts)
            got = self._parts[key] = (p, (max(p["transfer"] + p["barrier"], p["compute"]) + p["contention"]
                                          + p["launch"] + p["clears"]))
        return got

    def _kernel_parts(self, code: KernelCode, launch: tuple, facts: list[tuple]) -> dict[str, float]:
        """``kernel_parts`` from the facts of the kernel's launch and steps."""
        L, spec = code.launch, code.spec
        instances, iters, slots, resident, scale, loop, bar_ns = launch
        ns = {"load": 0.0, "overlap": 0.0, "compute": 0.0, "store": 0.0}
        barrier = 0.0
        atomic = 0                  # transfer.atomic_warps
        u_loop = min(spec.unroll, iters)
        ipb = spec.ipb
        for in_loop, once, has_barrier, pid, kind, T, warps in facts:
            runs = instances if in_loop else slots * L.span
            if once:                # once for the block's span of instances across the loop
                runs = -(-runs // L.span)
            if has_barrier:
                barrier += bar_ns * runs
            if warps:
                atomic += -(-instances // (L.span if once else 1)) * warps
            if pid is None:
                continue            # clears of on-chip accumulators: a register or shared write
            if pid == UNMEASURED:
                raise KfuseError(f"calibration {self.cal.describe()} has no measurement of {self._missing(code)}; "
                                 "recalibrate (kfuse calibrate)")
            # a loop unrolled beyond its serial iterations runs only those (small sizes)
            u = u_loop if in_loop else 1
            where = resident
            if kind != "compute":
                # a variant whose instance has fewer threads than the kernel's leaves the others
                # idle while its routines run (its probe ran in its own instance): its loads and
                # stores have that fraction of the SM's threads in flight (a `quad` call, 8 threads
                # per instance, beside `warp` calls of 32: a quarter)
                where = resident * min(1.0, T * ipb / L.threads)
            ns[kind] += self.routine_ns(pid, loop, u, ipb, where) * runs * scale
        # a load declared to overlap (what other instances read again, from L2) runs beside the rest
        return {"transfer": max(ns["load"] + ns["store"], ns["overlap"]) * 1e-9, "compute": ns["compute"] * 1e-9,
                "barrier": barrier * 1e-9, "launch": self.launch_seconds,
                "clears": bool(L.clears) * self.cal.clear_ns * 1e-9,      # one memset clears them all
                "contention": atomic * DEFAULT_MACHINE.atomic}

    def _launch_facts(self, code: KernelCode, dims: dict[int, int], itemsize: int) -> tuple:
        """What ``kernel_parts`` reads of a kernel's launch: (instances, serial iterations, instance
        slots, resident fraction, strip scale, loop axis of the probes, barrier ns).  Kept for the
        kernels of one frame (their launches share its ``args`` tuple, kept alive with the facts)
        that agree in everything else these read of the launch, at the same ``dims`` (a search's
        sizes, which it does not change) and itemsize: a kernel's unrolled copies; else by their
        content (the launch's fields and the variants' whole axes they read)."""
        L, spec = code.launch, code.spec
        key = (id(L.args), L.threads, L.smem_bytes_per_real, L.ipb, L.span, L.iters, L.loop, id(dims), itemsize)
        got = self._launches.get(key)
        if got is not None and got[0] is L.args and got[1] is dims:
            return got[2]
        # kernels of other frames (other fusions) with the same launch facts: most of a long script's
        content = (L.axis_dims, L.axis_extent, L.cluster, L.cluster_axis, L.nesting, L.loop, L.span, L.iters,
                   L.carried, L.whole_entries, L.ipb, L.threads, L.smem_bytes_per_real, L.rows,
                   any(not v.dims for v, _ in L.clears), spec.ipb, spec.loop, spec.nesting,
                   tuple(kc.variant.whole for kc in spec.calls), id(dims), itemsize)
        got = self._launch_content.get(content)
        if got is not None and got[0] is dims:
            facts = got[1]
        else:
            facts = self._new_launch_facts(code, dims, itemsize)
            if len(self._launch_content) >= FACTS_KEPT:
                self._launch_content.clear()
            self._launch_content[content] = (dims, facts)
        if len(self._launches) >= FACTS_KEPT:
            self._launches.clear()
        self._launches[key] = (L.args, dims, facts)
        return facts

    def _new_launch_facts(self, code: KernelCode, dims: dict[int, int], itemsize: int) -> tuple:
        """``_launch_facts``, found."""
        L, spec, dev = code.launch, code.spec, self.device
        instances = L.instances(dims)
        iters = L.iterations(dims, target_blocks(dev["sms"], dev["max_threads_per_sm"], L.threads))
        slots = L.grid(dims, iters) * spec.ipb
        resident = resident_fraction(dev, L.threads, L.smem_bytes_per_real * itemsize)
        scale = self._strip_scale(L, spec, dims)
        loop = spec.loop if spec.nesting == 2 else "i"
        return (instances, iters, slots, resident, scale, loop, self.barrier_ns(spec.nesting, L.threads))

    def _strip_scale(self, L: LaunchInfo, spec: KernelSpec, dims: dict[int, int]) -> float:
        """Of a strip kernel (variants spanning an axis whole): its probes' price scaled to its
        width.  A strip wider than the calibration's matrix is priced from the probe of a strip of
        the matrix's width (``_probed_macros``): scaled by its width NC over that width.  A
        strip whose rows end short of NC (rows of 6000 in strips of 8192) is priced as a whole
        one: its threads hold fewer columns each, with fewer loads in flight, and it measured
        closer to a whole strip than to its share of one (scaling by the columns held, min(n, NC),
        chose slower strips: docs/design.md, 'Strips, clusters and bands').
        1 for other kernels."""
        n_cal = self.n_cal
        wide = max([L.axis_extent[n] for n, a in enumerate(("i", "j")[:len(L.axis_extent)])
                    if any(a in kc.variant.whole for kc in spec.calls)], default=0)
        return wide / n_cal if n_cal and wide > n_cal else 1.0

    def _probed_macros(self, kc) -> tuple:
        """The macros whose probe prices a call's routines: its own, but a strip wider than the
        calibration's matrix (NC > n) takes the strip of that width, whose probe ran all in bounds
        (the wider one's ran half its row out of bounds, at half the loads per thread: priced 3.5 %
        over its measure, float32 gemv at n = 16384), scaled to its width by ``_strip_scale``."""
        n_cal = self.n_cal
        v = kc.variant
        if not n_cal or not v.whole or v.cluster or v.tile is None:
            return kc.macros
        sides = {v.tile[("i", "j").index(a)] for a in v.whole if a in ("i", "j")}
        if not any(isinstance(m, str) and dict(kc.macros).get(m, 0) > n_cal and n_cal in v.macros.get(m, ())
                   for m in sides):
            return kc.macros
        return tuple((k, n_cal if k in sides and val > n_cal else val) for k, val in kc.macros)

    def _step_facts(self, steps: tuple) -> list[tuple]:
        """Per step, what ``kernel_parts`` reads of it: (in the serial loop, once per span, a
        barrier before it, its routine's probe id or None for a clear, its kind with finishes
        counted as compute (on chip), its variant's threads per instance, the warps of an
        instance its store adds partial results with, ``transfer.atomic_step_warps``).  Kept by the steps'
        identity (the tuple is kept alive with them): a kernel's unrolled copies and its
        instances-per-block choices share one steps tuple."""
        return self._numbered_step_facts(steps)[0]

    def _numbered_step_facts(self, steps: tuple) -> tuple[list[tuple], int]:
        """(``_step_facts``, a number that steps of the same facts share)."""
        got = self._facts.get(id(steps))
        if got is not None and got[0] is steps:
            return got[1], got[2]
        facts: list[tuple] = []
        by_step = self._step_fact
        for s in steps:
            # a step's facts by its identity: the analyses of a program share the steps of the
            # calls they begin with (codegen/schedule.py ScheduleMemo.prefixes)
            known = by_step.get(id(s))
            if known is not None and known[0] is s:
                facts.append(known[1])
                continue
            fact: tuple
            if s.routine is None:
                fact = (s.phase == "loop", s.once_per_span, s.barrier, None, None, 0, 0)
            else:
                # the routine's facts: by its identity (the library's objects), macros and phase
                ident = (id(s.kc.call.function), id(s.kc.variant), s.kc.macros, id(s.routine), s.phase == "loop")
                got = self._routine_facts.get(ident)
                if got is None:
                    got = self._routine_facts[ident] = self._facts_of(s)
                fact = (s.phase == "loop", s.once_per_span, s.barrier) + got
            by_step[id(s)] = (s, fact)
            facts.append(fact)
        if len(self._facts) >= FACTS_KEPT:
            self._facts.clear()     # a model may rank many programs: it must not keep their kernels alive
            by_step.clear()
        content = tuple(facts)
        number = self._fact_numbers.get(content)
        if number is None:
            if len(self._fact_numbers) >= FACTS_KEPT:
                self._fact_numbers.clear()      # numbers come from a counter: none is given twice
            number = self._fact_numbers[content] = next(self._numbers)
        self._facts[id(steps)] = (steps, facts, number)
        return facts, number

    def _probe_key(self, s) -> str:
        """The calibration's key of the probe that prices a step's routine (``_probed_macros``)."""
        return routine_key(s.kc.call.function, s.kc.variant, self._probed_macros(s.kc), s.routine)

    def _facts_of(self, s) -> tuple:
        """(probe id, kind, threads per instance, warps adding partials) of a step's routine."""
        pid = self.cal.routines.get(self._probe_key(s), UNMEASURED)
        kind = "compute" if s.routine.kind == "finish" else s.routine.kind
        T = math.prod(s.kc.value_of(t) for t in s.kc.variant.threads) if kind != "compute" else 0
        return pid, "overlap" if s.routine.overlap else kind, T, atomic_step_warps(s)

    def kernel_time(self, code: KernelCode, dims: dict[int, int], entries: dict[int, int], itemsize: int) -> float:
        missing = self._missing(code)
        if missing is not None:
            factored = self._factored_time(code, dims, entries, itemsize)
            if factored is not None:
                return factored
            # a kernel with routines this calibration did not measure (a strip kernel, a function
            # added to the library since): priced by the transfer model (its bytes at the copy
            # bandwidth, launch, clear, atomic and barrier terms; docs/design.md, 'The calibrated model')
            if not code.launch.whole_entries:
                fn = missing.split("/")[0]
                notice_once(("unmeasured", self.cal.key, fn),
                            f"calibration {self.cal.describe()} has no measurement of {missing}: kernels with "
                            f"{fn} are priced by the transfer model (kfuse calibrate measures them)")
            return transfer_kernel_time(code, dims, entries, itemsize)
        return self._found_parts(code, dims, itemsize)[1]

    def _factored_time(self, code: KernelCode, dims: dict[int, int], entries: dict[int, int],
                       itemsize: int) -> float | None:
        """A kernel whose unmeasured routines all belong to functions timed whole (the
        calibration's ``kernels``: a sparse mat-vec, a stencil): the transfer model's time, each
        such call's operand bytes taking its measured factor of their time at the copy bandwidth
        (at the call's mean row length or grid entries, log-linear between the points measured,
        clamped); None where an unmeasured routine's function has no factor."""
        if not self.cal.kernels:
            return None
        factored: dict[int, tuple] = {}
        for s in code.steps:
            if s.routine is None or id(s.kc) in factored or self._probe_key(s) in self.cal.routines:
                continue
            entry = self.cal.kernels.get(kernel_factor_key(s.kc.call.function, s.kc.variant))
            if entry is None:
                return None
            factored[id(s.kc)] = (s.kc, entry)
        seconds = transfer_kernel_time(code, dims, entries, itemsize)
        for kc, entry in factored.values():
            call = kc.call
            operands = [v for v in call.bindings().values() if isinstance(v, Value)]
            if entry["by"] == "mean_row":
                csr = next((v for v in operands if v.type == "csr"), None)
                if csr is None:
                    return None
                rows, _, nnz = (dims[d] for d in csr.dims)
                x = nnz / max(1, rows)
            else:
                x = entries[call.outputs[0].id]
            moved = sum(entries[v.id] for v in operands) * itemsize
            seconds += (factor_at(entry["points"], x) - 1.0) * moved / DEFAULT_MACHINE.bandwidth
        return seconds

    def _missing(self, code: KernelCode) -> str | None:
        """The key of the kernel's first routine this calibration did not measure, or None where
        it measured them all.  Read from the steps' facts (``_numbered_step_facts``, memoised per
        step and routine: an unmeasured routine's probe id is UNMEASURED); whether any is missing is
        kept by the facts' number (kernels of other functions may share it, so the key is not)."""
        facts, number = self._numbered_step_facts(code.steps)
        measured = self._measured_numbers.get(number)
        if measured is None:
            if len(self._measured_numbers) >= FACTS_KEPT:
                self._measured_numbers.clear()
            measured = self._measured_numbers[number] = all(f[3] != UNMEASURED for f in facts)
        if measured:
            return None
        return next(self._probe_key(s) for s, f in zip(code.steps, facts) if f[3] == UNMEASURED)


def factor_at(points, x: float) -> float:
    """A kernel factor at ``x`` from points (x, factor) of rising x: log-linear in x between the
    two nearest, clamped at the ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, f0), (x1, f1) in zip(points, points[1:]):
        if x <= x1:
            w = math.log(x / x0) / math.log(x1 / x0)
            return f0 + w * (f1 - f0)
    return points[-1][1]


def _along_ipb(points: list[dict], ipb: int, field: str = "ns") -> float:
    """Value at ``ipb`` instances per block (or threads per block): log-linear between the
    nearest measured, clamped."""
    return _at_ipb(_ipb_table(points, field), ipb)


def _ipb_table(points: list[dict], field: str = "ns") -> tuple[list, dict]:
    """(instances per block measured, sorted; the field's value at each, the first point's)."""
    by: dict = {}
    for p in points:
        by.setdefault(p["ipb"], p[field])
    return sorted(by), by


def _at_ipb(table: tuple[list, dict], ipb: int) -> float:
    """``_along_ipb`` of the points an ``_ipb_table`` holds."""
    xs, by = table
    if ipb <= xs[0]:
        return by[xs[0]]
    if ipb >= xs[-1]:
        return by[xs[-1]]
    hi = next(x for x in xs if x >= ipb)
    lo = max(x for x in xs if x <= ipb)
    if hi == lo:
        return by[lo]
    t = (math.log2(ipb) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return by[lo] + t * (by[hi] - by[lo])


# ---- which model ranks plans ------------------------------------------------------------------
_noticed: set[tuple] = set()


def notice_once(key: tuple, msg: str, warn=None) -> None:
    """A notice, once per process: to ``warn`` (prefixed "kfuse: ") when given, else a warning of
    the "kfuse" logger (silenced by ``logging.getLogger("kfuse").setLevel(logging.ERROR)`` or
    ``kfuse -q``)."""
    if key in _noticed:
        return
    _noticed.add(key)
    if warn is not None:
        warn(f"kfuse: {msg}")
    else:
        logging.getLogger("kfuse").warning(msg)


def _facts_here(device: dict) -> dict | None:
    """``device`` with the multiprocessor facts of the GPU at hand, or None without a GPU or where
    they agree."""
    from ..runtime.gpu import current_device_info
    facts = current_device_info()
    if facts is None or all(device.get(k) == v for k, v in facts.items()):
        return None
    return {**device, **facts}


def on_this_gpu(cal: Calibration) -> Calibration:
    """A calibration measured on another GPU, given the multiprocessor facts of the GPU at hand
    (SMs, threads, blocks and shared memory per SM): the runtime picks grids and serial iterations
    by them (``ir.kernel.target_blocks``), so the model's occupancy, waves and iterations must be those
    the kernels will get.  The measured times stay the other GPU's.  Unchanged without a GPU."""
    device = _facts_here(cal.device)
    return cal if device is None else replace(cal, device=device)


def transfer_on_this_gpu():
    """The transfer model with the multiprocessor facts of the GPU at hand (``DEFAULT_MACHINE``,
    the H100's, without a GPU or on an H100)."""
    device = _facts_here(DEFAULT_MACHINE.device)
    if device is None:
        return DEFAULT_MACHINE
    return replace(DEFAULT_MACHINE, device=device,
                   name=f"transfer model (H100 defaults, this GPU's {device['sms']} multiprocessors)")


def choose_model(lib: Library, dtype: str, warn=None):
    """The model that ranks plans: this GPU's calibration for this library and dtype; else a
    shipped (or other) calibration of the library, with a notice; else the transfer model, with a
    notice.  Notices are printed once per process."""
    from .transfer import DEFAULT_MACHINE
    from ..runtime.gpu import gpu_name
    gpu = gpu_name()
    exact, other = find(gpu, lib.digest, dtype, warn=warn or logging.getLogger("kfuse").warning)
    if exact is not None:
        return CalibratedModel(exact)
    # one line: why, what ranks the plans, then the library and dtype it was asked for
    why = "no GPU here" if gpu is None else f"no calibration of this {gpu}"
    which = f"(library {lib.digest}, {dtype})"
    if other is not None:
        here = on_this_gpu(other)
        facts = (f", with this GPU's {here.device['sms']} multiprocessors (`kfuse calibrate` measures this GPU)"
                 if here is not other else "")
        source = (f"the shipped {other.gpu} calibration" if Path(other.source).parent == SHIPPED else
                  f"the {other.gpu} calibration in {other.source}")
        notice_once(("other", gpu, lib.digest, dtype, other.key),
                    f"{why}: plans are ranked with {source} {which}{facts}", warn)
        return CalibratedModel(here)
    hint = "run `kfuse calibrate` on a GPU, with --library DIR for your own library"
    notice_once(("transfer", gpu, lib.digest, dtype),
                f"no calibration of this library: plans are ranked with the transfer model {which}; {hint}", warn)
    return transfer_on_this_gpu()
