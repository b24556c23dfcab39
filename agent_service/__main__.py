"""python -m agent_service: serve the models under test."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent_service.registry import DEFAULT_MODEL_ROOT, ModelRegistry
from common.server import add_service_arguments, options_from_args, serve


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agent_service",
        description="Serves RL policies by name from a model root (manifest.yaml + <name>/model.zip); "
        "batched deterministic actions over gRPC (gauntlet.v1.AgentService).",
    )
    parser.add_argument(
        "--model-root",
        type=Path,
        default=DEFAULT_MODEL_ROOT,
        help=f"folder with manifest.yaml and one folder per model (default: the bundled zoo, {DEFAULT_MODEL_ROOT})",
    )
    parser.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (default 1: small MLPs)")
    add_service_arguments(parser, port=50052, metrics_port=9102)
    args = parser.parse_args()
    options = options_from_args(args)
    import torch  # only the services that run networks import torch

    torch.set_num_threads(args.torch_threads)
    registry = ModelRegistry(args.model_root)
    # load every model now: the first lock-step of a campaign should not pay for imports and unzipping
    registry.preload()
    from agent_service.server import register

    serve("agent", options, lambda server: register(server, registry))


if __name__ == "__main__":
    main()
