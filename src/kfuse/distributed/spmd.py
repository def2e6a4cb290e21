"""The SPMD entry point in the conventions of ``torch.distributed``: one process per GPU
(``torchrun``), a script compiled once, called on every rank with its local blocks.

    import torch.distributed as dist, kfuse.distributed as kd
    dist.init_process_group("nccl"); rank = dist.get_rank(); torch.cuda.set_device(local_rank)
    prog = kd.compile("examples/bicgk.kf", dist.get_world_size())
    A_loc = prog.split("A", A, rank)                  # or generate the rank's rows directly
    out = prog(rank, A=A_loc, p=p, r=prog.split("r", r, rank))
    q = prog.gather("q", out["q"])                     # the whole vector on every rank

Local segments run through ``CompiledScript.__call__`` on torch's current stream; collectives go
through ``torch.distributed`` on the caller's process group (``group``), or through a
``cupyx.distributed`` NCCL communicator (``comm``) when torch is not used.  Every call first
all-gathers each rank's sizes and refuses, on every rank alike, sizes that disagree
(``check_sizes``).

Run on up to 4 GPUs (tests/test_gpu_distributed.py, benchmarks/multigpu.py; docs/performance.md,
'Several GPUs').  The partitioning and collectives it follows are also proved by the CPU
simulation (``simulate.py``, tests/test_distributed.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..compiler.api import compile as compile_script, read_script_file
from ..compiler.compiled import CompiledScript
from ..errors import KfuseError, LaunchError
from ..frontend import parse_script
from ..library.loader import load_library
from ..library.schema import Library
from .partition import Collective, Local, Partitioned, Placement, partition, row_ranges


class _Torch:
    """Collectives over a ``torch.distributed`` process group (NCCL)."""

    def __init__(self, group):
        import torch
        import torch.distributed as dist
        if not dist.is_initialized():
            raise KfuseError("torch.distributed is not initialized: call "
                             "torch.distributed.init_process_group('nccl') first (torchrun sets the environment)")
        self.torch, self.dist, self.group = torch, dist, group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)

    def tensor(self, x):
        t = self.torch
        return x if isinstance(x, t.Tensor) else t.from_dlpack(x)

    def stream(self):
        return self.torch.cuda.current_stream()

    def all_reduce(self, arrays: list) -> list:
        ts = [self.tensor(a) for a in arrays]
        if len(ts) == 1:
            self.dist.all_reduce(ts[0], group=self.group)
            return ts
        flat = self.torch.cat([t.reshape(-1) for t in ts])          # one NCCL call for the batch
        self.dist.all_reduce(flat, group=self.group)
        out, o = [], 0
        for t in ts:
            t.copy_(flat[o:o + t.numel()].view_as(t))
            o += t.numel()
            out.append(t)
        return out

    def all_gather(self, block, rows: list[int]):
        t = self.tensor(block)
        m = max(rows)
        if t.shape[0] < m:                                         # blocks padded to the largest
            t = self.torch.cat([t, t.new_zeros((m - t.shape[0],) + tuple(t.shape[1:]))])
        out = t.new_empty((self.world_size * m,) + tuple(t.shape[1:]))
        self.dist.all_gather_into_tensor(out, t.contiguous(), group=self.group)
        return self.torch.cat([out[r * m:r * m + n] for r, n in enumerate(rows)])

    def all_gather_ints(self, values: list[int]) -> np.ndarray:
        t = self.torch.tensor(values, dtype=self.torch.int64, device="cuda")
        out = t.new_empty(self.world_size * len(values))
        self.dist.all_gather_into_tensor(out, t, group=self.group)
        return out.cpu().numpy().reshape(self.world_size, len(values))


class _Cupy:
    """Collectives over a ``cupyx.distributed`` NCCL communicator."""

    def __init__(self, comm, world_size: int, rank: int):
        import cupy
        self.cp, self.comm, self.world_size, self.rank = cupy, comm, world_size, rank

    def stream(self):
        return None

    def all_reduce(self, arrays: list) -> list:
        xs = [self.cp.asarray(a) for a in arrays]
        flat = self.cp.concatenate([x.reshape(-1) for x in xs])
        self.comm.all_reduce(flat, flat, "sum")
        o = 0
        for x in xs:
            x[...] = flat[o:o + x.size].reshape(x.shape)
            o += x.size
        return xs

    def all_gather(self, block, rows: list[int]):
        x = self.cp.asarray(block)
        m = max(rows)
        buf = self.cp.zeros((m,) + x.shape[1:], dtype=x.dtype)
        buf[:x.shape[0]] = x
        out = self.cp.empty((self.world_size * m,) + x.shape[1:], dtype=x.dtype)
        self.comm.all_gather(buf, out, buf.size)
        return self.cp.concatenate([out[r * m:r * m + n] for r, n in enumerate(rows)])

    def all_gather_ints(self, values: list[int]) -> np.ndarray:
        x = self.cp.asarray(values, dtype=self.cp.int64)
        out = self.cp.empty(self.world_size * len(values), dtype=self.cp.int64)
        self.comm.all_gather(x, out, len(values))
        return self.cp.asnumpy(out).reshape(self.world_size, len(values))


class DistributedScript:
    """A script partitioned over ``world_size`` ranks, each local segment compiled by kfuse."""

    def __init__(self, part: Partitioned, library: Library, compiled: list[CompiledScript],
                 group=None, comm=None):
        self.part, self.library, self.compiled = part, library, compiled
        self.group, self.comm = group, comm
        self.check_sizes = True           # all-gather the sizes on every call (False: reuse the last)
        self._backend: Any = None
        self._sizes: dict[tuple, dict[int, int]] = {}

    @property
    def world_size(self) -> int:
        return self.part.world_size

    def backend(self, rank: int):
        if self._backend is None:
            self._backend = _Torch(self.group) if self.comm is None else _Cupy(self.comm, self.world_size, rank)
            if self._backend.world_size != self.world_size:
                raise KfuseError(f"compiled for {self.world_size} ranks, the process group has "
                                 f"{self._backend.world_size}")
        if self._backend.rank != rank:
            raise KfuseError(f"called as rank {rank} in the process of rank {self._backend.rank}")
        return self._backend

    # -- helpers over whole arrays -------------------------------------------------------------
    def placement(self, name: str) -> Placement:
        for p in self.part.inputs + self.part.outputs:
            if p.name == name:
                return p
        raise KfuseError(f"{name!r} is no input or output of the script "
                         f"(inputs: {', '.join(p.name for p in self.part.inputs)})")

    def split(self, name: str, whole, rank: int):
        """Rank ``rank``'s part of the whole input (or output) ``name``: its row block, or all of it."""
        p = self.placement(name)
        if p.layout != "split" or p.dim is None:
            return whole
        start, stop = self.part.rows(p.dim, int(whole.shape[0]))[rank]
        return whole[start:stop]

    def gather(self, name: str, local):
        """The whole output ``name`` on every rank, from each rank's part (after a call: the row
        blocks come from the sizes that call checked)."""
        p = self.placement(name)
        if p.layout != "split" or p.dim is None:
            return local
        if self._backend is None or not self._sizes:
            raise KfuseError("gather: call the program first (the row blocks come from its sizes)")
        sizes = self._sizes[next(reversed(self._sizes))]
        rows = [b - a for a, b in self.part.rows(p.dim, sizes[p.dim])]
        return self._backend.all_gather(local, rows)

    # -- the call --------------------------------------------------------------------------------
    def __call__(self, rank: int, /, **inputs) -> dict[str, Any]:
        """Run on rank ``rank`` with its local inputs (split ones: its row block; replicated ones:
        whole); returns each output by name (split: this rank's rows; replicated: whole)."""
        backend = self.backend(rank)
        names = {p.name for p in self.part.inputs}
        if set(inputs) != names:
            missing, extra = sorted(names - set(inputs)), sorted(set(inputs) - names)
            raise LaunchError(f"rank {rank}: " + "; ".join(
                ([f"missing input(s) {', '.join(missing)}"] if missing else [])
                + ([f"unknown input(s) {', '.join(extra)}"] if extra else [])))
        sizes = self._checked_sizes(rank, inputs, backend)
        env: dict[str, Any] = {p.local: inputs[p.name] for p in self.part.inputs}
        stream = backend.stream()
        k = 0
        for seg in self.part.segments:
            if isinstance(seg, Local):
                prog = self.compiled[k]
                k += 1
                got = prog(stream=stream, **{n: env[n] for n in seg.inputs})
                got = got if len(seg.outputs) > 1 else (got,)
                env.update(zip(seg.outputs, got))
            else:
                self._collective(seg, env, sizes, rank, backend)
        return {p.name: env[p.local] for p in self.part.outputs}

    def _collective(self, seg: Collective, env: dict, sizes: dict[int, int], rank: int, backend) -> None:
        if seg.op == "all_reduce":
            done = backend.all_reduce([env[src] for src, _, _ in seg.items])
            env.update({dst: x for (_, dst, _), x in zip(seg.items, done)})
            return
        for src, dst, dim in seg.items:
            assert dim is not None
            ranges = self.part.rows(dim, sizes[dim])
            if seg.op == "all_gather":
                env[dst] = backend.all_gather(env[src], [b - a for a, b in ranges])
            else:                                                   # slice: a view of the rows
                env[dst] = env[src][ranges[rank][0]:ranges[rank][1]]

    def _checked_sizes(self, rank: int, inputs: dict, backend) -> dict[int, int]:
        key = tuple((n, tuple(getattr(x, "shape", ()))) for n, x in sorted(inputs.items()))
        if not self.check_sizes and key in self._sizes:
            return self._sizes[key]
        ndims = len(self.part.program.dims)
        whole, block = [-1] * ndims, [-1] * ndims
        problem = 0                                 # 1 + index of the first input inconsistent here
        for i, p in enumerate(self.part.inputs):
            if p.type == "scalar":
                continue
            shape = tuple(getattr(inputs[p.name], "shape", ()))
            if len(shape) != len(p.dims):
                problem = problem or i + 1
                continue
            for j, (d, n) in enumerate(zip(p.dims, shape)):
                slot = block if (j == 0 and p.layout == "split") else whole
                if slot[d] not in (-1, n):
                    problem = problem or i + 1
                slot[d] = n
        table = backend.all_gather_ints([problem] + whole + block)   # every rank sees every rank's
        sizes = self._agreed(table, ndims)
        self._sizes.pop(key, None)
        self._sizes[key] = sizes
        return sizes

    def _agreed(self, table: np.ndarray, ndims: int) -> dict[int, int]:
        part, P = self.part, self.world_size
        for r in range(P):
            if table[r, 0]:
                p = part.inputs[int(table[r, 0]) - 1]
                raise LaunchError(f"rank {r}: input {p.name} has a shape that disagrees with the script or "
                                  "with that rank's other inputs")
        sizes: dict[int, int] = {}
        for d in range(ndims):
            name = part.dim_names[d]
            wholes = {int(x) for x in table[:, 1 + d] if x >= 0}
            if len(wholes) > 1:
                raise LaunchError(f"ranks disagree on size {name}: {sorted(wholes)} "
                                  f"(per rank: {[int(x) for x in table[:, 1 + d]]})")
            blocks = [int(x) for x in table[:, 1 + ndims + d]]
            if min(blocks) < 0:
                if wholes:
                    sizes[d] = wholes.pop()
                continue
            n = wholes.pop() if wholes else sum(blocks)
            expect = [b - a for a, b in row_ranges(n, P, part.row_block, name)]
            if blocks != expect:
                raise LaunchError(f"the ranks hold {blocks} rows of {name} = {n}; row blocks of "
                                  f"{part.row_block} over {P} ranks give {expect} (split whole arrays "
                                  "with split())")
            sizes[d] = n
        return sizes


def compile(script: str | Path, world_size: int, dtype: str = "float32", row_block: int | None = None,  # noqa: A001
            library: Library | None = None, group=None, comm=None, **options) -> DistributedScript:
    """Partition ``script`` over ``world_size`` ranks and compile each local segment with
    ``kfuse.compile(..., dtype, **options)``.  Collectives use ``torch.distributed`` on ``group``
    (None: the default group) or, given ``comm``, a ``cupyx.distributed`` NCCL communicator."""
    lib = library if library is not None else load_library()
    if isinstance(script, Path) or ("\n" not in script and ";" not in script):
        source, file = read_script_file(Path(script)), str(script)
    else:
        source, file = script, "<script>"
    part = partition(parse_script(source, lib, file), lib, world_size, row_block)
    compiled = [compile_script(seg.text, dtype=dtype, library=lib, device_scalars=seg.scalar_inputs, **options)
                for seg in part.locals]
    return DistributedScript(part, lib, compiled, group=group, comm=comm)


def split(array, rank: int, world_size: int, row_block: int = 32):
    """Rank ``rank``'s row block of a whole array (rows balanced in blocks of ``row_block``)."""
    start, stop = row_ranges(int(array.shape[0]), world_size, row_block)[rank]
    return array[start:stop]


def gather(local, group=None):
    """The whole array on every rank from each rank's row block (``torch.distributed``; blocks may
    differ in length)."""
    backend = _Torch(group)
    rows = backend.all_gather_ints([int(local.shape[0])])[:, 0].tolist()
    return backend.all_gather(local, rows)
