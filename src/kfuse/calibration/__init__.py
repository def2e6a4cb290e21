"""The GPU calibration campaign (``kfuse calibrate``).

``probes``   micro-kernels timing one library routine in a simulated fusion environment
``measure``  time them all on the GPU (plus launch, clears, barriers) and write a calibration

The calibration files and the model that reads them live in ``cost/`` (``store``, ``calibrated``).
"""
