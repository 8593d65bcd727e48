"""NVIDIA's silicon table: measured serving runs (TTFT, TPOT) that `policy validate` replays.

The PyPI package ``aiconfigurator-core`` (Apache-2.0) ships
``aiconfigurator_core/systems/silicon_sample.csv``: one row per timed benchmark of vLLM,
SGLang or TensorRT-LLM (backend and version, the Hugging Face ``model_path``, ``system`` such
as ``h100_sxm``, precision, ISL, OSL, ``batch_size`` = the benchmark's concurrency, TP and the
measured ``silicon_ttft_ms`` / ``silicon_tpot_ms``). This is its one reader: `read_silicon`
keeps every column as the CSV spells it (``raw``) and parses the few the replay needs, so the
measured figures a validation prints are the CSV's own numbers (``float`` of the text).

Where the table comes from (`silicon_path`): ``--silicon FILE``, else the installed
``aiconfigurator-core`` (the ``aiconfigurator`` extra), else an error naming both.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SiliconTableError

__all__ = ["PACKAGE", "PACKAGE_CSV", "REQUIRED", "SiliconRow", "read_silicon", "silicon_path"]

#: the columns a row must have (the rest are kept in `raw`)
REQUIRED = ("id", "backend", "backend_version", "model_path", "system", "precision", "mode", "isl", "osl",
            "batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")
PACKAGE = "aiconfigurator_core"
PACKAGE_CSV = ("systems", "silicon_sample.csv")


@dataclass(frozen=True)
class SiliconRow:
    """One measured serving run (the CSV's row; `raw` holds every column as text)."""

    id: str
    backend: str
    backend_version: str
    model: str  # the CSV's model_path
    system: str
    precision: str
    mode: str  # agg (one engine serves prefill and decode) or disagg
    isl: int
    osl: int
    concurrency: int  # batch_size: the benchmark's client concurrency (0: the row does not say)
    tp: int
    measured_ttft_ms: float
    measured_tpot_ms: float
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    def int_field(self, name: str, default: int = 1) -> int:
        """A parallelism column (pp_size, attention_dp_size, moe_ep_size ...): empty -> default."""
        text = (self.raw.get(name) or "").strip()
        try:
            return int(float(text)) if text else default
        except ValueError:
            return default


def silicon_path(path=None) -> Path:
    """The table to read: `path` (``--silicon FILE``), else the installed aiconfigurator-core's."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise SiliconTableError(f"--silicon {path}: no such file (give aiconfigurator-core's silicon_sample.csv, "
                                    "or install the extra: pip install 'sitsprof[aiconfigurator]')")
        return p
    import importlib.util

    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SiliconTableError("no silicon table: aiconfigurator-core is not installed (pip install "
                                "'sitsprof[aiconfigurator]') and no --silicon FILE was given")
    p = Path(next(iter(spec.submodule_search_locations))).joinpath(*PACKAGE_CSV)
    if not p.is_file():
        raise SiliconTableError(f"the installed aiconfigurator-core has no {'/'.join(PACKAGE_CSV)} "
                                "(0.12.0 ships it); pass --silicon FILE")
    return p


def _number(text: str, kind, path, line: int, name: str):
    try:
        return kind(float(text)) if kind is int else kind(text)
    except (ValueError, TypeError, OverflowError):  # text, a short row's None, inf as an int
        said = "missing (a short row)" if text is None else f"{text!r}, not a number"
        raise SiliconTableError(f"{path}:{line}: column {name} is {said} "
                                "(the file is not aiconfigurator's silicon table, or is damaged)") from None


def _source_concurrency(r: dict) -> str:
    """A disaggregated row leaves batch_size empty; its source note may say
    ``silicon_concurrency=N``; else 0 (unknown)."""
    for part in (r.get("silicon_data_source") or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == "silicon_concurrency" and value.strip():
            return value.strip()
    return "0"


def read_silicon(path=None) -> list[SiliconRow]:
    """Every row of the table at `silicon_path(path)`, in file order."""
    p = silicon_path(path)
    try:
        return _read_rows(p)
    except (csv.Error, UnicodeDecodeError) as exc:  # a binary file, or a field past csv's limit
        raise SiliconTableError(f"{p}: not a silicon table ({exc}); expected aiconfigurator-core's "
                                "systems/silicon_sample.csv") from None


def _read_rows(p) -> list[SiliconRow]:
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise SiliconTableError(f"{p}: not a silicon table, column(s) {', '.join(missing)} missing "
                                    "(expected aiconfigurator-core's systems/silicon_sample.csv)")
        rows = []
        for line, r in enumerate(reader, start=2):
            rows.append(SiliconRow(
                id=r["id"], backend=r["backend"], backend_version=r["backend_version"], model=r["model_path"],
                system=r["system"], precision=r["precision"], mode=r["mode"],
                isl=_number(r["isl"], int, p, line, "isl"), osl=_number(r["osl"], int, p, line, "osl"),
                concurrency=_number(r["batch_size"] or _source_concurrency(r), int, p, line, "batch_size"),
                tp=_number(r["tp_size"] or "1", int, p, line, "tp_size"),
                measured_ttft_ms=_number(r["silicon_ttft_ms"], float, p, line, "silicon_ttft_ms"),
                measured_tpot_ms=_number(r["silicon_tpot_ms"], float, p, line, "silicon_tpot_ms"),
                raw=dict(r)))
    return rows
