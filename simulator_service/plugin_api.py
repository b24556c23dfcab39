"""The simulator's plug-in surface: what a subject pack's simulator-side parts (backend, env, injector) may import.

A pack (subjects/<family>/) imports nothing else of the simulator (an import-linter contract holds it to this
module), so the simulator's internals can change without touching a pack. The simulator loads those parts by
name through their entry points (common/plugins.py ``ROLE_GROUPS["simulator"]``); see docs/development/plugins.md.
"""

from __future__ import annotations

from simulator_service.backends.gymnasium import RemoteSubjectEnv, SubjectEnv, describe_observation
from simulator_service.backends.hosts import Endpoint, EndpointLeases, parse_endpoint, parse_endpoints
from simulator_service.injectors import Injector, make_injector
from simulator_service.subject import SignalDecl, Subject, SubjectError

__all__ = [
    "Endpoint",
    "EndpointLeases",
    "Injector",
    "RemoteSubjectEnv",
    "SignalDecl",
    "Subject",
    "SubjectEnv",
    "SubjectError",
    "describe_observation",
    "make_injector",
    "parse_endpoint",
    "parse_endpoints",
]
