"""Misuse of compiled programs and @kfuse.jit functions on the GPU: random scripts called with
arrays of wrong shapes, dtypes, layouts, devices and kinds (NumPy, CuPy, torch on the CPU and the
GPU), empty sizes, outputs that alias inputs (whole or as views) or are of the wrong shape or
dtype, and scalars of odd kinds.  Every call must either run (and then agree with the float64
reference) or raise a KfuseError; anything else is printed with its traceback.

    PYTHONPATH=src python3 docs/experiments/misuse_fuzz.py [--cases 400] [--seed 0]
"""
import argparse
import random
import traceback

import numpy as np

import kfuse
from kfuse.errors import KfuseError
from kfuse.frontend.random_scripts import random_script
from kfuse.library.loader import load_library
from kfuse.reference import evaluate, relative_error


def host(x):
    """A float64 NumPy copy of an input (None where it has no float value: the call must refuse)."""
    try:
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        elif hasattr(x, "get"):
            x = x.get()
        return np.asarray(x, dtype=np.float64) if getattr(x, "ndim", 0) else float(x)
    except Exception:     # noqa: BLE001
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import cupy as cp
    import torch
    rng = random.Random(args.seed)
    lib = load_library()
    bad = ran = refused = 0
    kinds = {}
    for case in range(args.cases):
        dt = rng.choice(["float32", "float64"])
        script = random_script(lib, rng.randrange(10**6), calls=rng.randint(1, 5))
        prog = kfuse.compile(script.text, dtype=dt, tuned=False)
        n = rng.choice([1, 7, 33, 100])
        sizes = {d.id: n for d in prog.program.dims}
        inputs = {}
        for v in prog.program.inputs:
            if v.type == "scalar":
                inputs[v.name] = 1.5
            else:
                shape = tuple(sizes[d] for d in v.dims)
                inputs[v.name] = cp.asarray(np.random.default_rng(case).standard_normal(shape), dtype=dt)
        out = None
        what = rng.choice(["none", "dtype", "shape", "layout", "numpy", "torch_cpu", "torch_gpu", "empty",
                           "alias", "alias_view", "out_shape", "out_dtype", "scalar_kind", "int", "zero_d",
                           "jit_numpy"])
        names = [v.name for v in prog.program.inputs if v.type != "scalar"]
        scal = [v.name for v in prog.program.inputs if v.type == "scalar"]
        k = rng.choice(names) if names else None
        try:
            if what == "dtype" and k:
                inputs[k] = inputs[k].astype("float32" if dt == "float64" else "float64")
            elif what == "shape" and k:
                a = inputs[k]
                inputs[k] = cp.zeros(tuple(s + 1 for s in a.shape), dtype=a.dtype) + 1
            elif what == "layout" and k and inputs[k].ndim == 2:
                inputs[k] = cp.asfortranarray(inputs[k])
            elif what == "layout" and k:
                inputs[k] = cp.repeat(inputs[k], 2)[::2]
            elif what == "numpy" and k:
                inputs[k] = cp.asnumpy(inputs[k])
            elif what == "torch_cpu" and k:
                inputs[k] = torch.as_tensor(cp.asnumpy(inputs[k]))
            elif what == "torch_gpu":
                inputs = {q: (torch.as_tensor(a, device="cuda") if hasattr(a, "ndim") else a) for q, a in inputs.items()}
            elif what == "empty" and k:
                a = inputs[k]
                inputs = {q: (cp.zeros(tuple(0 for _ in b.shape), dtype=b.dtype) if hasattr(b, "ndim") else b)
                          for q, b in inputs.items()}
            elif what in ("alias", "alias_view") and k:
                o = prog.program.outputs[0]
                src = inputs[k]
                if what == "alias_view":
                    src = src.ravel()[1:]
                out = {o.name: src}
            elif what == "out_shape":
                o = prog.program.outputs[0]
                out = {o.name: cp.zeros((3, 3, 3), dtype=dt)}
            elif what == "out_dtype":
                o = prog.program.outputs[0]
                shape = tuple(sizes[d] for d in o.dims) if o.type != "scalar" else ()
                out = {o.name: cp.zeros(shape, dtype="float16")}
            elif what == "scalar_kind" and scal:
                inputs[rng.choice(scal)] = rng.choice([np.float16(1.0), True, 1 + 2j, cp.zeros(3), None, "1.0",
                                                       cp.float32(2.0), np.int64(3), torch.tensor(2.0)])
            elif what == "int" and k:
                inputs[k] = inputs[k].astype("int32")
            elif what == "zero_d" and k:
                inputs[k] = cp.asarray(1.0, dtype=dt)
            elif what == "jit_numpy":
                f = kfuse.jit(lambda x, y: x + 2.0 * y)
                f(np.ones(10, dt), np.ones(10, dt))
                continue
            before = {q: host(a) for q, a in inputs.items()}
            got = prog(**inputs, out=out, sync=True) if out else prog(**inputs, sync=True)
            ran += 1
            got = got if isinstance(got, tuple) else (got,)
            if any(b is None for b in before.values()):
                raise AssertionError(f"ran with an input that has no float value: {what}")
            ref, mag = evaluate(prog.program, before), evaluate(prog.program, before, magnitude=True)
            for o, g in zip(prog.program.outputs, got):
                err = relative_error(host(g), ref[o.id], mag[o.id])
                if not err < (1e-4 if dt == "float32" else 1e-10):
                    raise AssertionError(f"{o.name}: relative error {err:.1e} after {what}")
        except KfuseError as e:
            refused += 1
            kinds.setdefault(what, set()).add(type(e).__name__)
        except Exception:     # noqa: BLE001 - what this looks for
            bad += 1
            print("=" * 70)
            print(what, k, dt, n)
            print(script.text)
            traceback.print_exc(limit=4)
    print(f"{args.cases} calls: {ran} ran, {refused} refused with a KfuseError, {bad} other exceptions")
    for w, ks in sorted(kinds.items()):
        print(f"  {w}: {', '.join(sorted(ks))}")


if __name__ == "__main__":
    main()
