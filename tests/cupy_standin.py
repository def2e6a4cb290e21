"""A CPU stand-in for the part of CuPy that ``kfuse calibrate`` uses: it compiles nothing and
runs nothing, but checks every launch against the kernel's signature in the module source
(argument count and types, block size against __launch_bounds__, shared memory against the
opt-in limit), so the calibration's host side is tested without a GPU."""
import itertools
import re
import types

import numpy as np

ATTRS = {16: 132, 39: 2048, 81: 233472, 97: 232448, 106: 32, 111: 1024}


class CuPyStandIn:
    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.launches = []
        clock = itertools.count()
        standin = self

        class Device:
            def __init__(self, i=0):
                self.id = i

            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

        class Event:
            def record(self):
                self.t = next(clock)

            def synchronize(self):
                pass

        class Stream:
            def synchronize(self):
                pass

        class Function:
            def __init__(self, name, params, bound):
                self.name, self.params, self.bound = name, params, bound
                self.max_dynamic_shared_size_bytes = 48 * 1024

            def __call__(self, grid, block, args, shared_mem=0):
                standin.check(self, grid, block, args, shared_mem)

        class RawModule:
            def __init__(self, code, options, backend):
                self.code = code

            def compile(self):
                pass

            def get_function(self, name):
                m = re.search(r'__global__ void (?:__launch_bounds__\((\d+)\)\s*)?' + name + r'\(([^)]*)\)', self.code)
                assert m, f"no kernel {name} in the module"
                params = [p.strip() for p in m.group(2).split(",") if p.strip()]
                return Function(name, params, int(m.group(1) or 1024))

        class Mem:
            def memset_async(self, v, n):
                pass

        class ndarray(np.ndarray):
            @property
            def data(self):
                return Mem()

        class Runtime:
            def deviceGetAttribute(self, attr, dev):
                return ATTRS[attr]

            def getDeviceCount(self):
                return 1

            def deviceSynchronize(self):
                return None

            def getDeviceProperties(self, i):
                return {"name": b"Stand-in GPU"}

        self.ndarray = ndarray
        self.cuda = types.SimpleNamespace(
            Device=Device, Event=Event, get_current_stream=lambda: Stream(),
            get_elapsed_time=lambda s, e: 0.01 * (e.t - s.t), runtime=Runtime(),
            compiler=types.SimpleNamespace(CompileException=RuntimeError),
            driver=types.SimpleNamespace(CUDADriverError=RuntimeError))
        self.RawModule = RawModule

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype).view(self.ndarray)

    def check(self, f, grid, block, args, shared_mem):
        assert len(grid) == 1 and 1 <= grid[0] < 2**31, (f.name, grid)
        assert block[0] <= f.bound and block[0] % 32 == 0, (f.name, block, f.bound)
        assert shared_mem <= max(48 * 1024, f.max_dynamic_shared_size_bytes) <= ATTRS[97], (f.name, shared_mem)
        assert len(args) == len(f.params), (f.name, len(args), f.params)
        for a, p in zip(args, f.params):
            if p.startswith("real*"):
                assert isinstance(a, np.ndarray) and a.dtype == self.dtype, (f.name, p)
            elif p.startswith("long long"):
                assert isinstance(a, np.int64), (f.name, p, type(a))
            elif p.startswith("int"):
                assert isinstance(a, np.int32), (f.name, p, type(a))
            elif p.startswith("real"):
                assert isinstance(a, self.dtype.type), (f.name, p, type(a))
            else:
                raise AssertionError(f"{f.name}: unexpected parameter {p}")
        self.launches.append((f.name, grid[0], block[0], shared_mem))
