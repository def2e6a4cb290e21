"""The GPU as the runtime sees it: lazy access to CuPy (with an error that says how to install it)
and the device facts read once (name, multiprocessor limits, the grid target)."""
from __future__ import annotations

from ..errors import LaunchError


def cupy():
    try:
        import cupy as cp
    except ImportError as e:
        raise LaunchError("running kernels needs CuPy: pip install 'kfuse[gpu]' "
                          f"(or cupy-cuda13x); compiling to CUDA works without it ({e})") from None
    return cp


def have_gpu() -> bool:
    try:
        import cupy as cp
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:   # noqa: BLE001 - any failure here means "no usable GPU"
        return False


def gpu_name() -> str | None:
    """Name of the current GPU, or None without CuPy or a GPU."""
    try:
        import cupy as cp
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    except Exception:   # noqa: BLE001 - no CuPy, no driver or no device: no GPU to key on
        return None
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


_clusters: list[bool] = []


def clusters_available() -> bool:
    """Can the current GPU run kernels of thread-block clusters (compute capability 9.0 or later)?
    True without CuPy or a GPU: the code is then built for sm_90 (nvcc's checks, the H100)."""
    if not _clusters:
        try:
            import cupy as cp
            ok = int(cp.cuda.Device().compute_capability) >= 90
        except Exception:   # noqa: BLE001 - no CuPy, no driver or no device: code for sm_90
            ok = True
        _clusters.append(ok)
    return _clusters[0]


# CUDA device attributes (cudaDeviceAttr values), with H100 values if a query fails
_ATTRS = {"sms": (16, 132), "max_threads_per_sm": (39, 2048), "smem_per_sm": (81, 233472),
          "smem_optin": (97, 232448), "max_blocks_per_sm": (106, 32), "smem_reserved": (111, 1024)}
H100_DEVICE = {key: default for key, (_, default) in _ATTRS.items()}    # the facts of an H100


def device_info(device: int) -> dict:
    """A device's multiprocessor facts (the keys of a calibration's ``device``)."""
    rt = cupy().cuda.runtime
    out = {}
    for key, (attr, default) in _ATTRS.items():
        try:
            out[key] = int(rt.deviceGetAttribute(attr, device))
        except Exception:   # noqa: BLE001 - an old driver without the attribute: the H100 value
            out[key] = default
    return out


def current_device_info() -> dict | None:
    """The current GPU's multiprocessor facts, or None without CuPy or a GPU."""
    if not have_gpu():
        return None
    return device_info(cupy().cuda.Device().id)


_device_limits: dict[int, tuple[int, int]] = {}


def device_limits(device: int) -> tuple[int, int]:
    """(multiprocessors, most resident threads per multiprocessor) of ``device``, read once: what
    ``ir.kernel.target_blocks`` sizes a grid of automatic iterations by."""
    if device not in _device_limits:
        rt = cupy().cuda.runtime
        _device_limits[device] = (rt.deviceGetAttribute(rt.cudaDevAttrMultiProcessorCount, device),
                                  rt.deviceGetAttribute(rt.cudaDevAttrMaxThreadsPerMultiProcessor, device))
    return _device_limits[device]
