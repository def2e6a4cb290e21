"""P ranks simulated on the CPU: every rank's local segments evaluated by the float64 NumPy
reference, the collectives done with NumPy across the ranks -- the partitioning proved correct
without a GPU (tests compare the gathered results with the whole script's reference)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import KfuseError
from ..frontend import parse_script
from ..ir.program import Program
from ..library.schema import Library
from ..reference import evaluate
from .partition import Collective, Local, Partitioned, Placement


def bind_sizes(part: Partitioned, inputs: dict[str, Any]) -> dict[int, int]:
    """Dimension id -> size, from the whole input arrays (disagreeing sizes refused)."""
    sizes: dict[int, int] = {}
    for v in part.program.inputs:
        if v.type == "scalar":
            continue
        if v.name not in inputs:
            raise KfuseError(f"missing input {v.name!r}")
        shape = np.shape(inputs[v.name])
        if len(shape) != len(v.dims):
            raise KfuseError(f"input {v.name!r} has {len(shape)} dimension(s), the script declares {len(v.dims)}")
        for d, n in zip(v.dims, shape):
            if sizes.setdefault(d, n) != n:
                raise KfuseError(f"input {v.name!r}: size {part.dim_names[d]} is {n} here and {sizes[d]} "
                                 "in an earlier input")
    return sizes


def split_value(p: Placement, x: Any, rank: int, part: Partitioned, n: int | None = None) -> Any:
    """Rank ``rank``'s part of the whole value ``x`` placed as ``p`` (its block, or all of it)."""
    if p.layout != "split" or p.dim is None:
        return x
    start, stop = part.rows(p.dim, np.shape(x)[0] if n is None else n)[rank]
    return x[start:stop]


class Simulation:
    """The ranks' environments after running a partitioned script (``run``)."""

    def __init__(self, part: Partitioned, library: Library):
        self.part, self.library = part, library
        self._programs: dict[str, Program] = {}

    def program(self, seg: Local) -> Program:
        if seg.text not in self._programs:
            self._programs[seg.text] = parse_script(seg.text, self.library, name="local")
        return self._programs[seg.text]

    def run(self, inputs: dict[str, Any]) -> list[dict[str, Any]]:
        part, P = self.part, self.part.world_size
        sizes = bind_sizes(part, inputs)
        for d in part.split_dims():
            part.rows(d, sizes[d])                    # refuses too few row blocks, naming the size
        envs: list[dict[str, Any]] = [{} for _ in range(P)]
        for p in part.inputs:
            x = inputs[p.name]
            for r in range(P):
                envs[r][p.local] = split_value(p, np.asarray(x, dtype=np.float64) if p.type != "scalar"
                                               else float(x), r, part)
        for seg in part.segments:
            if isinstance(seg, Local):
                prog = self.program(seg)
                for env in envs:
                    got = evaluate(prog, {n: env[n] for n in seg.inputs})
                    for v in prog.outputs:
                        env[v.name] = got[v.id]
            else:
                self._collective(seg, envs, sizes)
        return envs

    def _collective(self, seg: Collective, envs: list[dict[str, Any]], sizes: dict[int, int]) -> None:
        part = self.part
        for src, dst, dim in seg.items:
            if seg.op == "all_reduce":
                total = sum(np.asarray(env[src], dtype=np.float64) for env in envs)
                for env in envs:
                    env[dst] = np.array(total, copy=True)
            elif seg.op == "all_gather":
                assert dim is not None
                whole = np.concatenate([env[src] for env in envs])
                if whole.shape[0] != sizes[dim]:
                    raise KfuseError(f"all_gather of {src}: {whole.shape[0]} rows, expected {sizes[dim]}")
                for env in envs:
                    env[dst] = whole.copy()
            elif seg.op == "slice":
                assert dim is not None
                ranges = part.rows(dim, sizes[dim])
                for r, env in enumerate(envs):
                    env[dst] = env[src][ranges[r][0]:ranges[r][1]]
            else:
                raise KfuseError(f"unknown collective {seg.op!r}")


def simulate(part: Partitioned, inputs: dict[str, Any], library: Library) -> dict[str, np.ndarray]:
    """Run ``part`` on ``part.world_size`` simulated ranks from the whole ``inputs``; the outputs
    gathered whole by script name (split ones concatenated in rank order; replicated ones checked
    equal on every rank)."""
    envs = Simulation(part, library).run(inputs)
    out: dict[str, np.ndarray] = {}
    for p in part.outputs:
        if p.layout == "split":
            out[p.name] = np.concatenate([env[p.local] for env in envs])
        else:
            first = np.asarray(envs[0][p.local])
            for r, env in enumerate(envs[1:], 1):
                if not np.array_equal(first, np.asarray(env[p.local])):
                    raise KfuseError(f"replicated output {p.name} differs between rank 0 and rank {r}")
            out[p.name] = first
    return out
