"""python -m agent_service: serve the models under test."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from agent_service.registry import DEFAULT_MODEL_ROOT, ModelRegistry
from common.lane import UNIX_PATH_MAX, private_lane_dir
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
    parser.add_argument(
        "--lane-dir",
        default="",
        metavar="DIR|off",
        help="folder for the Unix sockets of same-host lanes, the fast path a simulator on this host negotiates "
        "with OpenLane instead of ActStream (default: a fresh private folder under the system's temp folder, "
        "removed at exit; 'off' = ActStream only; docs/contracts/lanes.md)",
    )
    parser.add_argument(
        "--no-preload",
        dest="preload",
        action="store_false",
        help="load each model at its first use instead of at start (a quick start for a listing; the first act "
        "of each model then pays for loading it)",
    )
    parser.add_argument(
        "--preload-model",
        action="append",
        default=[],
        metavar="NAME",
        help="preload only this model (repeatable; default: every model of the model root): a suite started for "
        "one campaign loads the one model it runs, not the whole zoo",
    )
    add_service_arguments(parser, port=50052, metrics_port=9102)
    args = parser.parse_args()
    options = options_from_args(args)
    lane_dir = lane_folder(args.lane_dir)
    import torch  # only the services that run networks import torch

    torch.set_num_threads(args.torch_threads)
    registry = ModelRegistry(args.model_root)
    if args.preload:  # now: the first lock-step of a campaign should not pay for imports and unzipping
        registry.preload(args.preload_model or None)
    from agent_service.server import register

    own_folder = lane_dir if not args.lane_dir else None  # the default, private folder is ours to remove
    serve(
        "agent",
        options,
        lambda server: register(server, registry, lane_dir),
        on_stop=(lambda: shutil.rmtree(own_folder, ignore_errors=True)) if own_folder else None,
    )


def lane_folder(setting: str) -> Path | None:
    """--lane-dir as a folder (created private when it is our own), or None for 'off'; exits on a bad one."""
    if setting == "off":
        return None
    if not setting:
        try:
            return private_lane_dir()
        except OSError as exc:  # e.g. a read-only temp folder: serve without lanes rather than not at all
            print(f"warning: no same-host lanes (cannot create a lane folder: {exc.strerror})", file=sys.stderr)
            return None
    folder = Path(setting).resolve()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(f"error: --lane-dir {setting}: cannot create it ({exc.strerror})") from None
    longest = len(str(folder / ("0" * 16 + ".sock")).encode())
    if longest > UNIX_PATH_MAX:
        raise SystemExit(
            f"error: --lane-dir {setting}: its socket paths would be {longest} bytes, over the {UNIX_PATH_MAX} a "
            "Unix socket allows; choose a shorter folder"
        )
    return folder


if __name__ == "__main__":
    main()
