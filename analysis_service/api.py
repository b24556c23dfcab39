"""The analysis service's public Python surface: what code outside the service (the offline tools, the benches, the
replications) may import from it; the rest of the package is its internals.

An import-linter contract (pyproject.toml, "Tools reach a service only through its public surface") keeps offline/,
bench/ and replications/ to this module and the package's __init__. A name is added here when such a tool needs it,
re-exported under the name it keeps for callers; clients in other processes use the gRPC contract instead.
"""

from __future__ import annotations

from analysis_service.failure_clusters import cluster_diversity, gini_purity, mean_trajectory, pad_trajectories
from analysis_service.fault_diversity import (
    Grid,
    checkpoints_for,
    improvement,
    quartiles,
    relative_to_baseline,
    run_curves,
)
from analysis_service.metrics import wilson_interval
from analysis_service.performance_testing import PerformanceMeasurement, measure_performance, pearson
from analysis_service.statistics import (
    ClusterComparison,
    cluster_comparison,
    compare,
    kl_entropy,
    pooled_median_ratio_interval,
)

__all__ = [
    "checkpoints_for",
    "ClusterComparison",
    "cluster_comparison",
    "cluster_diversity",
    "compare",
    "gini_purity",
    "Grid",
    "improvement",
    "kl_entropy",
    "mean_trajectory",
    "measure_performance",
    "pad_trajectories",
    "pearson",
    "PerformanceMeasurement",
    "pooled_median_ratio_interval",
    "quartiles",
    "relative_to_baseline",
    "run_curves",
    "wilson_interval",
]
