"""The ranks of tests/test_gpu_distributed.py, launched by torchrun (not collected by pytest): one
process group runs every case given; each case is a script run through kfuse.distributed on whole
inputs split per rank, its outputs gathered and compared with the float64 reference, then sizes that
disagree between ranks, which must be refused.  Each rank writes DIR/rank<R>.txt (the ranks' stdout
interleave mid-line), one line per case: ``CASE rank R: ok`` or its failures.
Usage: torchrun --nproc_per_node P tests/distributed_worker.py DIR SCRIPT:N:DTYPE:ROW_BLOCK ..."""
import os
import sys
import traceback
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import kfuse.distributed as kd
from kfuse.errors import LaunchError
from kfuse.frontend import parse_script
from kfuse.library.loader import load_library
from kfuse.reference import evaluate, random_inputs, relative_error


def run_case(lib, script: str, n: int, dtype: str, row_block: int, rank: int, P: int) -> list[str]:
    prog = parse_script(open(script).read(), lib, script)
    inputs = random_inputs(prog, {d.id: n for d in prog.dims}, seed=7)        # the same on every rank
    tdt = getattr(torch, dtype)
    rounded = {k: (v.astype(dtype).astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    ref, mag = evaluate(prog, rounded), evaluate(prog, rounded, magnitude=True)
    ds = kd.compile(script, P, dtype=dtype, row_block=row_block, library=lib)
    local = {k: (torch.as_tensor(ds.split(k, v, rank), dtype=tdt, device="cuda").contiguous()
                 if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    out = ds(rank, **local)
    tol = 1e-12 if dtype == "float64" else 1e-5
    failures = []
    for v in prog.outputs:
        whole = ds.gather(v.name, out[v.name])
        got = torch.as_tensor(whole).double().cpu().numpy()
        err = relative_error(got, ref[v.id], mag[v.id])
        if not err <= tol:
            failures.append(f"{v.name} off by {err:.3g}")
    bad = dict(local)
    split_vec = next((p for p in ds.part.inputs if p.layout == "split" and p.type == "vector"), None)
    if split_vec is not None and P > 1:         # rank 0 holds one row too many: refused on every rank
        x = local[split_vec.name]
        bad[split_vec.name] = torch.cat([x, x[:1]]) if rank == 0 else x
        try:
            ds(rank, **bad)
            failures.append("rows dealt wrong were not refused")
        except LaunchError as e:              # dealt wrong (rows of ...) or out of step with rank 0's others
            if "rows of" not in str(e) and "disagrees" not in str(e):
                failures.append(f"unexpected message {e}")
    return failures


def main(outdir: str, cases: list[str]) -> int:
    # a case that raises on one rank leaves the others in a collective: NCCL's timeout ends them
    dist.init_process_group("nccl", timeout=timedelta(seconds=120))
    rank, P = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    lib = load_library()
    status = 0
    report = open(os.path.join(outdir, f"rank{rank}.txt"), "w")
    for case in cases:
        script, n, dtype, row_block = case.rsplit(":", 3)
        try:
            failures = run_case(lib, script, int(n), dtype, int(row_block), rank, P)
        except Exception:  # noqa: BLE001 - reported per case; the other cases still run
            failures = ["raised " + traceback.format_exc().replace("\n", " | ")]
        status |= bool(failures)
        print("\n".join(f"{case} rank {rank}: {f}" for f in failures) or f"{case} rank {rank}: ok",
              file=report, flush=True)
    report.close()
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
