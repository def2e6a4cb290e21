"""The launching side of the small kernels around a program's launches: the loop's control
module compiled (``control_module``; its text is the loop artifact's, ``ir/loop.LoopKernelWriter``),
and scalar arithmetic returned as results run on the device (``ScalarTail``; its text is
``ir/loop.ScalarText``'s).  The texts are written by ``codegen/loop/``; the runtime compiles and
launches them.

The loop kernels call ``cudaGraphSetConditional``, which lives in the device runtime library:
their module is compiled relocatable and linked with it (``-rdc=true``; CuPy links
``libcudadevrt``)."""
from __future__ import annotations


import numpy as np

from ..ir.loop import ScalarText
from .gpu import cupy


def control_module(source: str, relocatable: bool):
    """A loop's control module (``LoopKernelWriter.control``) or a kf_scalars module
    (``ScalarText.source``), compiled by NVRTC once per source and device; ``relocatable`` where
    its loop kernels set graph handles (linked with the device runtime)."""
    from .compiler import load_module
    return load_module(source, relocatable=relocatable)


class ScalarTail:
    """Scalar arithmetic returned as results -- a jitted function's (``rr_new / rr``,
    ``kfuse.sqrt(s)``) or a script's (``return sqrt(rr), rr / bb;``) -- computed on the device by
    one kf_scalars launch on the caller's stream: no framework operation per arithmetic step.
    ``code`` is its module as the compiler wrote it (``ir/loop.ScalarText``): ``code.reads[k]``
    the place of leaf k (the front end's: ``("out", k)``, ``("arg", i)``, ``("in", name)``).
    With ``code.numbers``, a leaf given as a host number (a script's scalar input passed as a
    Python number) is passed by value: the module is built once per device and set of such
    leaves."""

    def __init__(self, code: ScalarText):
        self.code = code
        self.dtype = np.dtype(code.dtype)
        self.reads, self.numbers = list(code.reads), code.numbers
        self.functions: dict = {}        # (device, leaves by value) -> kf_scalars

    def source(self, numbers: tuple[bool, ...] = ()) -> str:
        """The kf_scalars module, the leaves flagged in ``numbers`` read by value (none: every
        leaf by address): the code's text."""
        return self.code.source(numbers)

    def function(self, device: int, numbers: tuple[bool, ...] = ()):
        """kf_scalars on ``device``, the leaves flagged in ``numbers`` read by value (compiled once
        per device and flags)."""
        fn = self.functions.get((device, numbers))
        if fn is None:
            with cupy().cuda.Device(device):
                module = control_module(self.source(numbers), relocatable=False)
                fn = self.functions[device, numbers] = module.get_function("kf_scalars")
        return fn

    def __call__(self, outs, args) -> list | None:
        """A jitted function's results as 0-d arrays of ``outs[0]``'s framework, or None when a
        leaf is a host number."""
        from .args import torch_tensor_type
        sources = [outs[k] if where == "out" else args[k] for where, k in self.reads]
        like = outs[0]
        # CuPy arrays and torch CUDA tensors only, told by type (a torch tensor's
        # __cuda_array_interface__ builds a dict on every read: never read on this path)
        tensor = torch_tensor_type()
        for x in (like, *sources):
            if tensor is not None and isinstance(x, tensor):
                if not x.is_cuda:
                    return None
            elif not (hasattr(type(x), "__cuda_array_interface__") and isinstance(x, cupy().ndarray)):
                return None       # a host number (or host arrays standing in for the device's)
        return self.run(like, sources)

    def empty(self, like) -> list:
        """Results for one run: 0-d arrays of ``like``'s framework, device and element type."""
        from .args import torch_tensor_type
        tensor = torch_tensor_type()
        if tensor is not None and isinstance(like, tensor):
            return [like.new_empty(()) for _ in range(self.code.results)]
        cp = cupy()
        with cp.cuda.Device(like.data.device_id):
            return [cp.empty((), self.dtype) for _ in range(self.code.results)]

    def run(self, like, sources: list, stream: int | None = None, results: list | None = None) -> list:
        """Launch kf_scalars over ``sources`` (aligned with ``reads``: 0-d device arrays, or host
        numbers where ``numbers``) on ``stream`` (default: the current stream of ``like``'s
        framework), writing ``results`` (default: new ones, ``empty``); returns them."""
        from .args import current_stream, on_device, torch_tensor_type
        from .launch import KernelLaunch, PackedArgs
        tensor = torch_tensor_type()
        cp = cupy()
        torch_like = tensor is not None and isinstance(like, tensor)
        device = like.device.index if torch_like else like.data.device_id
        if results is None:
            results = self.empty(like)
        if stream is None:
            stream = current_stream(torch_like, device)
        numbers = tuple(self.numbers and not on_device(x, cp) for x in sources)
        fn = self.function(device, numbers)
        real = self.dtype.type
        args_c = tuple(_address(x, cp, tensor) for x in results) + tuple(
            real(float(x)) if number else _address(x, cp, tensor) for x, number in zip(sources, numbers))
        KernelLaunch(fn, 1, 1, PackedArgs(args_c), "kf_scalars").launch(stream)
        return results


def _address(x, cp, tensor) -> int:
    """A CuPy array's or torch tensor's pointer, read directly; another CUDA array's through
    ``adapt``."""
    if isinstance(x, cp.ndarray):
        return x.data.ptr
    if _is_tensor(x, tensor):
        return x.data_ptr()
    from .args import adapt, facts
    return facts(adapt(x, "a returned scalar's operand"))[4]


def _is_tensor(x, tensor) -> bool:
    return tensor is not None and isinstance(x, tensor)
