"""The agent service's public Python surface: what code outside the service (the offline tools, the benches, the
replications) may import from it; the rest of the package is its internals.

An import-linter contract (pyproject.toml, "Tools reach a service only through its public surface") keeps offline/,
bench/ and replications/ to this module and the package's __init__. A name is added here when such a tool needs it,
re-exported under the name it keeps for callers; clients in other processes use the gRPC contract instead.
"""

from __future__ import annotations

from agent_service.algorithms import algorithm_class
from agent_service.inference import predict_actions
from agent_service.qtable import FILE_NAME as QTABLE_FILE_NAME
from agent_service.qtable import QTablePolicy
from agent_service.registry import DEFAULT_MODEL_ROOT, ModelRegistry, model_file_name
from agent_service.segmentation import SegmentationModel

__all__ = [
    "algorithm_class",
    "DEFAULT_MODEL_ROOT",
    "model_file_name",
    "ModelRegistry",
    "predict_actions",
    "QTABLE_FILE_NAME",
    "QTablePolicy",
    "SegmentationModel",
]
