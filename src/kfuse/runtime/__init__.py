"""GPU runtime: NVRTC compilation through CuPy, argument checking, launches."""
