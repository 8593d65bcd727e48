"""Reading a JSON file a user gave: one reader, one set of failures, each said the same way.

A calibration, a policy results file, a model's config.json and a run's meta.json are all read
from paths a user can point anywhere: at a folder, a binary file, a Latin-1 file, a file that
is not JSON, or one nested deeper than Python's json can follow (it raises RecursionError, which
callers used to catch, or forget, one by one). `read_json_file` turns each of those into one
`JsonFileError` whose `problem` says what is wrong in words; each caller puts it in its own
error with what the file should have been (`CalibrationError`, `PolicyResultsError`, ...), so
the user still reads which option or file to fix.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import SitsprofError

__all__ = ["JsonFileError", "read_json_file"]


class JsonFileError(SitsprofError):
    """A file that could not be read as JSON; `problem` says why, without the path."""

    def __init__(self, path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def read_json_file(path) -> Any:
    """The JSON value in the UTF-8 file at `path`, or JsonFileError saying why it is none.

    Problems, as `JsonFileError.problem`: ``cannot read: <reason>`` (missing, a folder, no
    permission), ``not UTF-8 text (byte N: b'..')``, ``not JSON: <msg> at line N``, ``JSON nested
    too deeply to read``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise JsonFileError(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise JsonFileError(path, f"not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r})") \
            from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonFileError(path, f"not JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:  # arrays or objects nested thousands deep: json gives up
        raise JsonFileError(path, "JSON nested too deeply to read") from None
