"""The arrays a program is called with, read without converting them: CuPy arrays and torch CUDA
tensors directly (pointer, shape, dtype, strides, device), any other ``__cuda_array_interface__``
or ``__dlpack__`` producer through CuPy (zero copy).  ``signature`` is what a binding depends on;
``pointer`` what changes from call to call."""
from __future__ import annotations

import sys

import numpy as np

from ..errors import LaunchError
from .gpu import cupy

_TORCH_DTYPES: dict = {}


def torch_tensor_type():
    """torch.Tensor when torch is imported (kfuse never imports it itself), else None."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def current_stream(torch_in: bool, device: int) -> int:
    """The raw handle of the caller's current stream on ``device``: torch's with torch tensors (its
    C accessor, which builds no Stream object, where this torch has it), else CuPy's."""
    if torch_in:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream
    return cupy().cuda.get_current_stream().ptr


def on_device(x, cp) -> bool:
    """Is ``x`` a CUDA array (a CuPy array, a torch CUDA tensor, another ``__cuda_array_interface__``
    producer), read by address, rather than a host number?  A torch tensor is told by its type: its
    ``__cuda_array_interface__`` builds a dict on every read."""
    if isinstance(x, cp.ndarray):
        return True
    tensor = torch_tensor_type()
    if tensor is not None and isinstance(x, tensor):
        return bool(x.is_cuda)
    return hasattr(x, "__cuda_array_interface__")


def numpy_dtype(torch_dtype) -> np.dtype | None:
    if not _TORCH_DTYPES:
        torch = sys.modules["torch"]
        _TORCH_DTYPES.update({torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
                              torch.float16: np.dtype(np.float16), torch.int32: np.dtype(np.int32),
                              torch.int64: np.dtype(np.int64)})
    return _TORCH_DTYPES.get(torch_dtype)


def torch_dtype(dtype: np.dtype):
    torch = sys.modules["torch"]
    return {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[np.dtype(dtype)]


def adapt(x, name: str):
    """A CuPy array or a torch tensor for ``x`` (other producers converted through CuPy, zero
    copy); errors name the argument."""
    cp = cupy()
    if isinstance(x, cp.ndarray):
        return x
    tensor = torch_tensor_type()
    if tensor is not None and isinstance(x, tensor):
        if not x.is_cuda:
            raise LaunchError(f"{name}: torch tensor is on {x.device}; move it to the GPU (.cuda())")
        return x
    if isinstance(x, np.ndarray):
        raise LaunchError(f"{name}: a NumPy array lives in host memory; pass a CuPy array or a torch "
                          "CUDA tensor (cupy.asarray(x) copies it to the GPU)")
    if hasattr(x, "__cuda_array_interface__"):
        return cp.asarray(x)
    if hasattr(x, "__dlpack__"):
        try:
            return cp.from_dlpack(x)
        except Exception as e:   # noqa: BLE001 - a producer of host memory, or an unsupported dtype
            raise LaunchError(f"{name}: its DLPack capsule is not a CUDA array CuPy can take ({e})") from None
    raise LaunchError(f"{name}: expected a CuPy array, a torch CUDA tensor or a CUDA array "
                      f"(__cuda_array_interface__ / __dlpack__), got {type(x).__name__}")


def facts(x) -> tuple[tuple[int, ...], np.dtype, tuple[int, ...], int, int]:
    """(shape, dtype, strides in bytes, device, pointer) of an adapted array."""
    cp = cupy()
    if isinstance(x, cp.ndarray):
        return tuple(x.shape), x.dtype, tuple(x.strides), x.device.id, x.data.ptr
    dt = numpy_dtype(x.dtype)
    if dt is None:
        raise LaunchError(f"torch dtype {x.dtype} is not supported")
    return (tuple(x.shape), dt, tuple(s * dt.itemsize for s in x.stride()), x.device.index, x.data_ptr())


def signature(x):
    """A hashable description of everything about an array a binding depends on (not its pointer),
    or None for an object that is not a CuPy array or torch tensor (taken by the slow path)."""
    cp = cupy()
    if type(x) is cp.ndarray:
        return (x.shape, x.dtype, x.strides, x.device.id)
    tensor = torch_tensor_type()
    if tensor is not None and isinstance(x, tensor):
        return (x.shape, x.dtype, x.stride(), x.device)
    return None


def pointer(x) -> int:
    return x.data.ptr if type(x) is cupy().ndarray else x.data_ptr()
