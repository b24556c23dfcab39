"""The oracle service's public Python surface: what code outside the service (the offline tools, the benches, the
replications) may import from it; the rest of the package is its internals.

An import-linter contract (pyproject.toml, "Tools reach a service only through its public surface") keeps offline/,
bench/ and replications/ to this module and the package's __init__. A name is added here when such a tool needs it,
re-exported under the name it keeps for callers; clients in other processes use the gRPC contract instead.
"""

from __future__ import annotations

from oracle_service.oracles import Episode, get_oracle

__all__ = ["Episode", "get_oracle"]
