"""Host-side costs of the pieces of a call path (H100): what a fast plain call can be built from.
Run: PYTHONPATH=src python3 docs/experiments/call_path_costs.py"""
import ctypes
from functools import partial

import cupy as cp
import numpy as np

from explore_util import host_us_per_call

per_call_us = partial(host_us_per_call, n=2000)


src = r'''extern "C" __global__ void k(float* x, long long n, float a) { long long i = blockIdx.x * 256ll + threadIdx.x; if (i < n) x[i] *= a; }'''
mod = cp.RawModule(code=src)
f = mod.get_function("k")
x = cp.ones(1024, dtype=cp.float32)
rows = {}
rows["cupy RawKernel call (3 args)"] = per_call_us(lambda: f((4,), (256,), (x, np.int64(1024), np.float32(1.0))))

from kfuse.runtime.launch import PackedArgs, launch_dependent, _libcuda, _Config, _Attr
lib = _libcuda()
packed = PackedArgs((x, np.int64(1024), np.float32(1.0)))
rows["ctypes cuLaunchKernelEx (PDL attr)"] = per_call_us(lambda: launch_dependent(f, 4, 256, packed, "k"))
handle = ctypes.c_void_p(f.kernel.ptr)
cfg = _Config(4, 1, 1, 256, 1, 1, 0, cp.cuda.get_current_stream().ptr, None, 0)
cfgp = ctypes.byref(cfg)
L = lib.cuLaunchKernelEx
rows["ctypes cuLaunchKernelEx, prebuilt config"] = per_call_us(lambda: L(cfgp, handle, packed.pointers, None))
lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
LK = lib.cuLaunchKernel
rows["ctypes cuLaunchKernel, prebuilt args"] = per_call_us(lambda: LK(handle, 4, 1, 1, 256, 1, 1, 0, None, packed.pointers, None))
p0 = packed.values[0]
rows["patch a c_void_p value"] = per_call_us(lambda: setattr(p0, "value", 12345))
rows["cp.cuda.alloc(4096)"] = per_call_us(lambda: cp.cuda.alloc(4096))
mp = cp.cuda.alloc(1 << 20)
rows["cp.ndarray view on memptr"] = per_call_us(lambda: cp.ndarray((1024,), cp.float32, mp + 4096))
rows["cp.empty(1024)"] = per_call_us(lambda: cp.empty(1024, cp.float32))
rows["get_current_stream().ptr"] = per_call_us(lambda: cp.cuda.get_current_stream().ptr)
rows["cupy signature (shape,dtype,strides,device.id,ptr)"] = per_call_us(lambda: (x.shape, x.dtype, x.strides, x.device.id, x.data.ptr))
rows["cupy __cuda_array_interface__"] = per_call_us(lambda: x.__cuda_array_interface__)
s = cp.cuda.Stream(non_blocking=True)
with s:
    s.begin_capture()
    f((4,), (256,), (x, np.int64(1024), np.float32(1.0)))
    f((4,), (256,), (x, np.int64(1024), np.float32(1.0)))
    f((4,), (256,), (x, np.int64(1024), np.float32(1.0)))
    g = s.end_capture()
g.upload() if hasattr(g, "upload") else None
rows["cupy Graph.launch (3 kernels)"] = per_call_us(lambda: g.launch())
rows["stream.is_capturing()"] = per_call_us(lambda: cp.cuda.get_current_stream().is_capturing())
try:
    import torch
    t = torch.ones(1024, device="cuda")
    rows["torch.empty(1024)"] = per_call_us(lambda: torch.empty(1024, device="cuda"))
    dev = t.device
    rows["torch.empty(1024, device=dev obj)"] = per_call_us(lambda: torch.empty(1024, device=dev))
    rows["torch current_stream().cuda_stream"] = per_call_us(lambda: torch.cuda.current_stream().cuda_stream)
    rows["torch signature (shape,dtype,stride,device,ptr)"] = per_call_us(lambda: (t.shape, t.dtype, t.stride(), t.device, t.data_ptr()))
    rows["cp.asarray(torch tensor)"] = per_call_us(lambda: cp.asarray(t))
    rows["torch eager x.mul_(1.0)"] = per_call_us(lambda: t.mul_(1.0))
except ImportError:
    pass
for k, v in rows.items():
    print(f"{k:55s} {v:8.2f} us")
