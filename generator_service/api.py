"""The generator's public Python surface: what code outside the service (the offline tools, the benches, the
replications) may import from it; the rest of the package is its internals.

An import-linter contract (pyproject.toml, "Tools reach a service only through its public surface") keeps offline/,
bench/ and replications/ to this module and the package's __init__. A name is added here when such a tool needs it,
re-exported under the name it keeps for callers; clients in other processes use the gRPC contract instead.
"""

from __future__ import annotations

from generator_service.config import CampaignConfig
from generator_service.search_based.artifact import read_reference, reference_document, write_reference
from generator_service.search_based.dfs import depth_first_search, shortest_reference_search
from generator_service.search_based.performance import write_traces
from generator_service.search_based.safety_metrics import measure_suite
from generator_service.search_based.session import SessionEnvironment
from generator_service.search_based.trace_fuzzing import fittest_traces
from generator_service.strategies import make_strategy, strategies
from generator_service.strategies.base import Result, as_test_case
from generator_service.strategies.designate import SCALARS as DESIGNATE_SCALARS
from generator_service.strategies.indago import SETTINGS as INDAGO_SETTINGS
from generator_service.surrogates.artifact import FORMAT_VERSION as SURROGATE_FORMAT_VERSION
from generator_service.surrogates.artifact import load_surrogate, read_meta, write_artifact
from generator_service.surrogates.dataset import InteractionData, file_sha256, kept_indices, load_interaction_log
from generator_service.surrogates.encoding import Encoder
from generator_service.surrogates.features import FEATURE_KINDS, FeatureMap
from generator_service.surrogates.interaction_log import LOG_NAME as INTERACTION_LOG_NAME
from generator_service.surrogates.interaction_log import InteractionLog, read_interaction_log
from generator_service.surrogates.model import (
    DROPOUT,
    HIDDEN_UNITS,
    LDS_BINS,
    LDS_KERNEL_SIZE,
    LDS_SIGMA,
    LdsDensity,
    TrainSettings,
    check_kind,
    class_weights,
    fit,
    load_network,
    predict_scores,
    score_module,
)

__all__ = [
    "CampaignConfig",
    "check_kind",
    "class_weights",
    "depth_first_search",
    "shortest_reference_search",
    "DESIGNATE_SCALARS",
    "DROPOUT",
    "Encoder",
    "FEATURE_KINDS",
    "FeatureMap",
    "file_sha256",
    "fit",
    "fittest_traces",
    "HIDDEN_UNITS",
    "INDAGO_SETTINGS",
    "InteractionData",
    "INTERACTION_LOG_NAME",
    "InteractionLog",
    "kept_indices",
    "LDS_BINS",
    "LDS_KERNEL_SIZE",
    "LDS_SIGMA",
    "LdsDensity",
    "load_interaction_log",
    "load_network",
    "load_surrogate",
    "make_strategy",
    "measure_suite",
    "as_test_case",
    "predict_scores",
    "read_interaction_log",
    "read_meta",
    "read_reference",
    "reference_document",
    "Result",
    "score_module",
    "SessionEnvironment",
    "strategies",
    "SURROGATE_FORMAT_VERSION",
    "TrainSettings",
    "write_artifact",
    "write_reference",
    "write_traces",
]
