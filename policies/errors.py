"""Errors the policy engine reports to users (one line, exit status 2 from the CLI)."""
from __future__ import annotations

from sitsprof.common.errors import SitsprofError

__all__ = [
    "CapacityError",
    "CostModelError",
    "EmbedderError",
    "PolicyEngineError",
    "ServingReplayError",
    "SiliconTableError",
    "TraceFormatError",
    "UnknownModelError",
    "UnknownPolicyError",
]


class PolicyEngineError(SitsprofError, ValueError):
    """Base for user-facing policy-engine errors."""


class TraceFormatError(PolicyEngineError):
    """A trace file that cannot be read: names the file, the line (or record) and the problem."""

    def __init__(self, path, problem: str, line: int | None = None, fix: str | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        message = f"{where}: {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)


class CapacityError(PolicyEngineError):
    """An impossible cache capacity (zero, negative, or not a number)."""


class UnknownPolicyError(PolicyEngineError):
    """A policy name the registry does not know."""


class UnknownModelError(PolicyEngineError):
    """A model preset name that does not exist."""


class CostModelError(PolicyEngineError):
    """A cost model that cannot be built from what it was given."""


class EmbedderError(PolicyEngineError):
    """A prompt embedder that cannot be had: unknown spec, package not installed, no local model."""


class ServingReplayError(PolicyEngineError):
    """Serving-replay options that cannot be replayed: a block size the trace cannot be
    re-blocked to, a policy without an incremental form, an impossible engine setting."""


class SiliconTableError(PolicyEngineError):
    """A measured-serving table (`policy validate --silicon`) that cannot be read or found."""
