"""python -m translator_service: serve image-to-image translators."""

from __future__ import annotations

import argparse
from pathlib import Path

from common.server import add_service_arguments, options_from_args, serve
from translator_service.server import DEFAULT_TRANSLATOR_ROOT, register


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m translator_service",
        description="Translates batches of simulator images with TorchScript GAN generators loaded by name "
        "(gauntlet.v1.TranslatorService).",
    )
    parser.add_argument(
        "--model-root",
        type=Path,
        default=DEFAULT_TRANSLATOR_ROOT,
        help="folder with manifest.yaml and <name>/generator.pt (default: bundled, empty)",
    )
    add_service_arguments(parser, port=50056, metrics_port=9106)
    args = parser.parse_args()
    options = options_from_args(args)
    serve("translator", options, lambda server: register(server, args.model_root))


if __name__ == "__main__":
    main()
