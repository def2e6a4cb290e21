"""A device loop bound to its arrays: two buffer sets for the state, the body's program bound to
them, the small kernels around it, and the graphs of many steps (``runtime/loopgraph.py``).

The body (``loops._Body``, read through its fields only) says where each state entry of the next
step comes from; an ``Instance`` turns that into launches:

    step p (p = 0: set 0 -> set 1; p = 1: set 1 -> set 0):
        the program's kernels, patched to read set p and write set 1 - p
        copies (an entry the body passes on from another entry or output)
        kf_scalars (entries the body computes by scalar arithmetic)
        kf_loop_index (the fori counter, after everything that reads it)

An instance is made once per state signature, stream and invariant arrays and kept by the body;
each run copies the initial state into set 0, launches, and copies the final set out into new
arrays, so runs never share memory with what they return."""
from __future__ import annotations

import sys

import numpy as np

from ..errors import CompileError, LaunchError
from . import driver, loopgraph
from .args import adapt, facts, torch_tensor_type
from .control import control_module, control_source
from .gpu import cupy
from .binding import OUT, TMP
from .launch import KernelLaunch, PackedArgs

D2D, H2D = 3, 1          # cudaMemcpyKind
HOST_CHECK = 16           # steps between host checks where the driver has no conditional nodes
CHUNK_LAUNCHES = 512      # launches in one graph of a fori loop (its steps repeat it)


def _framework(leaves: list) -> tuple[bool, int]:
    """(torch?, device) of the state's arrays."""
    tensor = torch_tensor_type()
    arrays = [x for x in leaves if hasattr(x, "shape")]
    torch_in = tensor is not None and any(isinstance(x, tensor) for x in arrays)
    return torch_in, facts(adapt(arrays[0], "state"))[3]


def _caller_stream(torch_in: bool, device: int) -> int:
    if torch_in:
        torch = sys.modules["torch"]
        return torch.cuda.current_stream(device).cuda_stream
    return cupy().cuda.get_current_stream().ptr


class Instance:
    """See the module docstring."""

    @staticmethod
    def key(body, leaves: list, pred) -> tuple:
        torch_in, device = _framework(leaves)
        shapes = tuple(tuple(getattr(x, "shape", ())) for x in leaves)
        kept = tuple(facts(adapt(leaves[j], f"state entry {j}"))[4] for j, s in enumerate(body.sources)
                     if s == ("keep",) and hasattr(leaves[j], "shape"))
        return (torch_in, device, _caller_stream(torch_in, device), shapes, kept, pred)

    def __init__(self, body, leaves: list, pred):
        cp = cupy()
        self.body, self.pred = body, pred
        self.torch_in, self.device = _framework(leaves)
        self.dtype = body.dtype
        with cp.cuda.Device(self.device):
            self._build(leaves, pred)

    # -- memory ------------------------------------------------------------------------------------
    def _empty(self, shape):
        if self.torch_in:
            torch = sys.modules["torch"]
            from .args import torch_dtype
            return torch.empty(shape, dtype=torch_dtype(self.dtype), device=f"cuda:{self.device}")
        return cupy().empty(shape, self.dtype)

    def _leaf(self, x, j: int):
        """A state entry as an adapted array (a number becomes a 0-d array of the element type)."""
        if not hasattr(x, "shape"):
            a = self._empty(())
            a.fill_(float(x)) if self.torch_in else a.fill(float(x))
            return a
        a = adapt(x, f"state entry {j}")
        f = facts(a)
        if f[3] != self.device:
            raise LaunchError(f"state entry {j} is on GPU {f[3]}, the others on GPU {self.device}")
        if f[1] != self.dtype:
            raise LaunchError(f"state entry {j}: dtype {f[1]}, the loop runs {self.dtype}")
        return a

    def _build(self, leaves: list, pred) -> None:
        body, cp = self.body, cupy()
        given = [self._leaf(x, j) for j, x in enumerate(leaves)]
        self.shapes = [tuple(a.shape) for a in given]
        self.nbytes = [int(np.prod(s, dtype=np.int64)) * self.dtype.itemsize for s in self.shapes]
        # set[p][j]: entry j in buffer set p; an entry read in place is the caller's array in both
        self.sets = [[g if s == ("keep",) else self._empty(g.shape) for g, s in zip(given, body.sources)]
                     for _ in range(2)]
        for j, s in enumerate(body.sources):
            if s == ("keep",):
                self.sets[1][j] = self.sets[0][j]
        self.hidden = {k: self._empty(()) for k in body.hidden}     # outputs no entry takes: 0-d
        self.index = self._empty(())
        self.ctl = cp.zeros(4, np.int32)
        self.cst = cp.zeros(max(1, len(_consts(pred))), self.dtype)
        self.ptr = [[facts(a)[4] for a in s] for s in self.sets]
        # the program bound to set 0 -> set 1 (checks every argument once), patched per step
        ex = body.compiled.executor
        ins = {name: self._source(src, 0) for name, src in body.inputs.items()}
        outs = {body.lowered.outputs[k]: self._out(k, 0) for k in range(len(body.lowered.outputs))}
        self.pdl = None
        self._bind(ex, ins, outs)
        self.tmp = cp.cuda.alloc(self.binding.tmp_bytes) if self.binding.tmp_bytes else None
        # the small kernels
        self._split_fills()
        source = control_source(self.dtype.name, body.tails, pred, clears=len(self.clears))
        try:
            module = control_module(source, relocatable=pred is not None)
        except CompileError:
            if pred is None:
                raise
            self.conditional = False
            module = control_module(control_source(self.dtype.name, body.tails, pred, conditional=False,
                                                   clears=len(self.clears)), relocatable=False)
        else:
            self.conditional = pred is not None and driver.has_conditional_nodes()
        self.fn = {name: module.get_function(name) for name in
                   (["kf_scalars"] if body.tails else []) + (["kf_loop_clear"] if self.clears else [])
                   + ["kf_loop_set", "kf_loop_index"]
                   + (["kf_loop_first", "kf_loop_next", "kf_loop_again"] if pred is not None else [])}
        self.pred_reads = _leaves_of(pred) if pred is not None else []
        self.capture = driver.create_stream()
        self.graphs: dict = {}
        # the caller's arrays read in place stay alive with the graphs that read them
        self._keep = [g for g, s in zip(given, body.sources) if s == ("keep",)]

    def _bind(self, ex, ins, outs) -> None:
        self.binding = ex._bind(ins, outs, None, self.pdl)[0]
        b = self.binding
        self.patches = [([self._ptr(self.body.inputs[n], p) for n in b.array_inputs],
                         [self._out_ptr(self.body.lowered.outputs.index(n), p) for n in b.out_names])
                        for p in (0, 1)]

    def _split_fills(self) -> None:
        """The program's fills (kf_fill launches clearing reduced outputs before the kernels that
        add into them) leave the step: ``clears`` lists what they set, (pointer source, offset or
        index, entries, value), and one kf_loop_clear at the end of each step sets them for the
        next (the step before the first: ``start``).  The step's first kernel is then launched the
        ordinary way: it must wait for the step before it."""
        kept, clears = [], []
        for launch, patches in self.binding.launches:
            if launch.name == "kf_fill":
                values = launch.args.values
                for (_, src, a), n in zip(patches, (values[1].value, values[3].value)):
                    clears.append((src, a, int(n), float(values[4].value)))
            else:
                kept.append(launch)
        if kept and kept[0].dependent:
            kept[0] = kept[0].independent()
        self.kernels, self.clears = kept, clears

    def _clear(self, p: int) -> KernelLaunch:
        """kf_loop_clear of step p's reduced outputs."""
        args: list = []
        for src, a, n, value in self.clears:
            if src == OUT:
                ptr = self.patches[p][1][a]
            elif src == TMP:
                ptr = self.tmp.ptr + a
            else:
                raise LaunchError(f"a loop step clears memory of kind {src}, which it does not own")
            args += [ptr, np.int64(n), self.dtype.type(value)]
        most = max(n for _, _, n, _ in self.clears)
        return KernelLaunch(self.fn["kf_loop_clear"], min(1024, -(-most // 256)), 256, PackedArgs(tuple(args)),
                            "kf_loop_clear")

    def _source(self, src: tuple, p: int):
        if src == ("index",):
            return self.index
        if src[0] == "out":
            return self._out(src[1], p)
        return self.sets[p][src[1]]

    def _out(self, k: int, p: int):
        j = self.body.out_leaf.get(k)
        return self.hidden[k] if j is None else self.sets[1 - p][j]

    def _ptr(self, src: tuple, p: int) -> int:
        return facts(self._source(src, p))[4]

    def _out_ptr(self, k: int, p: int) -> int:
        return facts(self._out(k, p))[4]

    # -- one step ----------------------------------------------------------------------------------
    def step(self, p: int):
        """The launches of step p, as a function of a stream (for capture)."""
        b, body = self.binding, self.body
        ins, outs = self.patches[p]
        tmp = self.tmp.ptr if self.tmp is not None else 0
        extra: list = []
        for j, s in enumerate(body.sources):
            if s[0] == "copy":
                extra.append(("copy", self.ptr[1 - p][j], self._ptr(s[1], p), self.nbytes[j]))
        if body.tails:
            outs_t = [self.ptr[1 - p][j] for j, s in enumerate(body.sources) if s[0] == "tail"]
            reads = [self._ptr(src, p) for src in body.tail_reads]
            extra.append(("launch", self._launch("kf_scalars", *outs_t, *reads)))
        if body.indexed:
            extra.append(("launch", self._launch("kf_loop_index", facts(self.index)[4])))
        if self.clears:
            extra.append(("launch", self._clear(1 - p)))
        cp, kernels = cupy(), self.kernels

        def launches(stream: int) -> None:
            b.set_flip(p & b.alternate)
            b.patch(ins, outs, 0, tmp, [])
            for launch in kernels:
                launch.launch(stream)
            for item in extra:
                if item[0] == "copy":
                    cp.cuda.runtime.memcpyAsync(item[1], item[2], item[3], D2D, stream)
                else:
                    item[1].launch(stream)
        return launches

    def _launch(self, name: str, *args) -> KernelLaunch:
        return KernelLaunch(self.fn[name], 1, 1, PackedArgs(args), name)

    def _control(self, name: str, handle: int, set_: int | None, p_after: int | None) -> KernelLaunch:
        """kf_loop_first / kf_loop_next reading the predicate's entries in the set that holds the
        state (set 0 before the loop; after step p, set 1 - p)."""
        where = 0 if p_after is None else 1 - p_after
        args: list = [np.uint64(handle)]
        if set_ is not None:
            args.append(np.int32(set_))
        args.append(facts(self.ctl)[4])
        if _consts(self.pred):
            args.append(facts(self.cst)[4])
        args += [self.ptr[where][j] for j in self.pred_reads]
        return self._launch(name, *args)

    # -- runs --------------------------------------------------------------------------------------
    def start(self, leaves: list, index: float = 0.0, consts=(), most: int = 0) -> None:
        """Copy the initial state into set 0 and set the counter, numbers and bound, on the
        caller's stream."""
        cp = cupy()
        self.stream = _caller_stream(self.torch_in, self.device)
        with cp.cuda.Device(self.device):
            for j, s in enumerate(self.body.sources):
                if s == ("keep",):
                    continue
                x = self._leaf(leaves[j], j)
                cp.cuda.runtime.memcpyAsync(self.ptr[0][j], facts(x)[4], self.nbytes[j], D2D, self.stream)
                self._hold = x       # a number's 0-d array must outlive the copy
            if self.body.indexed:
                self._launch("kf_loop_set", facts(self.index)[4], self.dtype.type(index)).launch(self.stream)
            if self.clears:
                self._clear(0).launch(self.stream)
            if self.pred is not None:
                # from pageable memory: staged before the call returns (no wait for the stream)
                self._host = (np.array([0, 1, most, 1], np.int32), np.array(list(consts) or [0.0], self.dtype))
                for dev, host in zip((self.ctl, self.cst), self._host):
                    cp.cuda.runtime.memcpyAsync(facts(dev)[4], host.ctypes.data, host.nbytes, H2D, self.stream)

    def _graph(self, key, make):
        g = self.graphs.get(key)
        if g is None:
            with cupy().cuda.Device(self.device):
                try:
                    g = make()
                except LaunchError:
                    if self.pdl is not None:
                        raise
                    # a driver that takes no programmatic launches in these graphs: plain launches
                    self.pdl = False
                    body = self.body
                    ins = {name: self._source(src, 0) for name, src in body.inputs.items()}
                    outs = {body.lowered.outputs[k]: self._out(k, 0) for k in range(len(body.lowered.outputs))}
                    self._bind(body.compiled.executor, ins, outs)
                    self._split_fills()
                    self.graphs.clear()
                    g = make()
            self.graphs[key] = g
        return g

    def run_counted(self, steps: int) -> None:
        """``steps`` steps from set 0, as graphs of up to CHUNK_LAUNCHES launches."""
        per = max(1, self.binding.launch_count + len(self.body.tails) + int(self.body.indexed))
        chunk = max(2, (CHUNK_LAUNCHES // per) // 2 * 2)
        chunk = min(chunk, steps - steps % 2) if steps >= 2 else 0
        if chunk:
            g = self._graph(("counted", chunk), lambda: loopgraph.counted(
                self.capture, [self.step(k % 2) for k in range(chunk)]))
            for _ in range(steps // chunk):
                g.launch(self.stream)
        rest = steps - (steps // chunk) * chunk if chunk else steps
        if rest:
            g = self._graph(("counted", rest), lambda: loopgraph.counted(
                self.capture, [self.step(k % 2) for k in range(rest)]))
            g.launch(self.stream)

    def run_while(self) -> tuple[int, int, bool]:
        """The while loop from set 0: (steps taken, the set holding the state, whether the
        predicate ended it).  The host waits here, once."""
        if self.conditional:
            try:
                g = self._graph(("while",), self._while_graph)
            except LaunchError:
                self.conditional = False       # e.g. a driver that refuses these graphs
            else:
                g.launch(self.stream)
                steps, _, _, holds = self._read_ctl()
                return steps, steps % 2, not holds
        return self._run_host_checked()

    def _while_graph(self):
        def first(s: int, h: int) -> None:
            self._control("kf_loop_first", h, 1, None).launch(s)

        def next_even(s: int, h: int) -> None:
            self._control("kf_loop_next", h, 1, 0).launch(s)

        def next_odd(s: int) -> None:
            self._control("kf_loop_next", 0, 0, 1).launch(s)

        def again(s: int, h: int) -> None:
            self._launch("kf_loop_again", np.uint64(h), facts(self.ctl)[4]).launch(s)
        return loopgraph.while_graph(self.capture, first, self.step(0), next_even, self.step(1), next_odd, again)

    def _run_host_checked(self) -> tuple[int, int, bool]:
        """Without conditional nodes: graphs of HOST_CHECK steps, each step counted, launched until
        the flag says stop; the state may be up to HOST_CHECK - 1 steps past the one that ended the
        loop (the count is exact)."""
        self._control("kf_loop_first", 0, 0, None).launch(self.stream)
        steps = max(2, HOST_CHECK // 2 * 2)

        def make():
            seq: list = []
            for k in range(steps):
                seq.append(self.step(k % 2))
                seq.append(self._control("kf_loop_next", 0, 0, k % 2).launch)
            return loopgraph.counted(self.capture, seq)
        g = self._graph(("host-checked", steps), make)
        while self._read_ctl()[1]:
            g.launch(self.stream)
        count, _, _, holds = self._read_ctl()
        return count, 0, not holds

    def _read_ctl(self) -> list[int]:
        """[steps taken, go on, most, predicate held] (waits for the stream)."""
        driver.synchronize(self.stream)
        return [int(v) for v in self.ctl.get()]

    def finish(self, p: int, leaves: list) -> list:
        """New arrays holding set ``p`` (copied on the caller's stream); entries read in place are
        the caller's own arrays."""
        cp = cupy()
        out = []
        with cp.cuda.Device(self.device):
            for j, s in enumerate(self.body.sources):
                if s == ("keep",):
                    out.append(leaves[j])
                    continue
                a = self._empty(self.shapes[j])
                cp.cuda.runtime.memcpyAsync(facts(a)[4], self.ptr[p][j], self.nbytes[j], D2D, self.stream)
                out.append(a)
        return out


def _consts(pred) -> list:
    """The const indices an expression reads (empty for none)."""
    if pred is None:
        return []
    found, stack = set(), [pred]
    while stack:
        e = stack.pop()
        if e[0] == "const":
            found.add(e[1])
        elif e[0] not in ("leaf", "num"):
            stack.extend(e[1:])
    return sorted(found)


def _leaves_of(pred) -> list[int]:
    """State entries a predicate reads, in the order of its ``p{k}`` pointers (leaf k is entry k:
    every entry up to the largest read is passed)."""
    top, stack = -1, [pred]
    while stack:
        e = stack.pop()
        if e[0] == "leaf":
            top = max(top, int(e[1]))
        elif e[0] not in ("const", "num"):
            stack.extend(e[1:])
    return list(range(top + 1))

