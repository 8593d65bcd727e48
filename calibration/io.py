"""Calibration files on disk: the shipped reference by name, reading with validation, and
writing through the one atomic writer so a crash never leaves half a calibration behind.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from sitsprof.common import jsonout
from sitsprof.common.atomic import atomic_write_text, make_folder

from .errors import CalibrationError
from .schema import validate_calibration

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
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CalibrationError("(file)", f"cannot read: {exc.strerror or exc}", str(path)) from None
    except UnicodeDecodeError as exc:
        raise CalibrationError("(file)", f"not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r}); "
                                         "a calibration file is UTF-8 JSON", str(path)) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CalibrationError("(file)", f"not JSON: {exc.msg} at line {exc.lineno}", str(path)) from None
    except RecursionError:
        raise CalibrationError("(file)", "not a calibration: JSON nested too deeply to read", str(path)) from None
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
