"""The simulator's public Python surface: what code outside the service (the offline tools, the benches, the
replications) may import from it; the rest of the package is its internals.

An import-linter contract (pyproject.toml, "Tools reach a service only through its public surface") keeps offline/,
bench/ and replications/ to this module and the package's __init__. A name is added here when such a tool needs it,
re-exported under the name it keeps for callers; clients in other processes use the gRPC contract instead.
"""

from __future__ import annotations

from simulator_service.backends import check_first_observation, make_env
from simulator_service.runner import Job, run_lockstep
from simulator_service.subject import Subject, get_subject, load_subjects
from simulator_service.trace import TraceRecorder

__all__ = [
    "check_first_observation",
    "get_subject",
    "Job",
    "load_subjects",
    "make_env",
    "run_lockstep",
    "Subject",
    "TraceRecorder",
]
