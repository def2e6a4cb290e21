"""Calibrated performance prediction.

``probes``   micro-kernels timing one library routine in a simulated fusion environment
``measure``  ``kfuse calibrate``: time them all on the GPU (plus launch, clears, barriers)
``store``    the calibration file: entries keyed by GPU name, library digest and dtype
``predict``  the calibrated model that ranks plans, and the choice of model (with notices)
``report``   ``kfuse report``: the paper's Tables 4 and 5 for the example sequences
"""
from .predict import CalibratedModel, choose_model
from .store import Calibration, CalibrationError, find, read_file, write_entry

__all__ = ["Calibration", "CalibrationError", "CalibratedModel", "choose_model", "find", "read_file", "write_entry"]
