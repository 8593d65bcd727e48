"""Calibration files on disk: the shipped reference by name, reading with validation, and
writing through the one atomic writer so a crash never leaves half a calibration behind.
"""
from __future__ import annotations

import os
from pathlib import Path

from sitsprof.common import jsonout
from sitsprof.common.atomic import atomic_write_text, make_folder
from sitsprof.common.jsonin import JsonFileError, read_json_file

from .errors import CalibrationError
from .schema import validate_calibration

__all__ = ["DATA_DIR", "REFERENCE", "load_calibration", "reference_path", "write_calibration"]

DATA_DIR = Path(__file__).resolve().parent / "data"
REFERENCE = "hopper-published"


def reference_path(name: str = REFERENCE) -> Path:
    """Path of a calibration shipped with sitsprof (``hopper-published``)."""
    return DATA_DIR / f"{name}.json"


def load_calibration(path: str | os.PathLike | None = None) -> dict:
    """Read and validate a calibration file; ``None`` or a shipped name loads the reference."""
    if path is None or (isinstance(path, str) and reference_path(path).exists() and not Path(path).exists()):
        path = reference_path(path or REFERENCE)
    path = Path(path)
    try:
        obj = read_json_file(path)
    except JsonFileError as exc:
        problem = exc.problem
        if problem.startswith("not UTF-8"):
            problem += "; a calibration file is UTF-8 JSON"
        elif problem.startswith("JSON nested"):
            problem = "not a calibration: " + problem
        raise CalibrationError("(file)", problem, str(path)) from None
    try:
        return validate_calibration(obj)
    except CalibrationError as exc:
        raise CalibrationError(exc.field, exc.problem, str(path)) from None


def write_calibration(obj: dict, path: str | os.PathLike) -> Path:
    """Validate, then write atomically (temporary file, fsync, rename)."""
    validate_calibration(obj)
    path = Path(path)
    make_folder(path.parent)
    atomic_write_text(path, jsonout.dumps(obj, indent=2) + "\n")  # strict JSON: NaN in free-form fields -> null
    return path
