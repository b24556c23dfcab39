"""python -m simulator_service: serve the subjects' simulators."""

from __future__ import annotations

import argparse

from common.endpoints import endpoint_type, endpoints_type
from common.server import add_outgoing_arguments, add_service_arguments, options_from_args, outgoing_credentials, serve
from simulator_service.frames import headless_gl
from simulator_service.subject import SUBJECT_PATH_ENV, SubjectError, load_subjects


def main() -> None:
    headless_gl()  # RenderEpisode draws MuJoCo scenes without a display
    parser = argparse.ArgumentParser(
        prog="python -m simulator_service",
        description="Runs test cases of the declared subjects in lock-step batches (gauntlet.v1.SimulatorService). "
        f"Subjects are YAML files: the built-in ones plus folders listed in ${SUBJECT_PATH_ENV}.",
    )
    parser.add_argument(
        "--agent-endpoint",
        type=endpoints_type("--agent-endpoint", allow_empty=True),
        default="",
        help="host:port of the agent service to act with; several replicas comma-separated (a:1,b:2): each "
        "lock-step group of a batch acts with one of them, round robin (--pipeline groups, so at most that many)",
    )
    parser.add_argument(
        "--translator-endpoint",
        type=endpoints_type("--translator-endpoint", allow_empty=True),
        default="",
        help="host:port of the translator service that image subjects' observation_translator runs on",
    )
    parser.add_argument(
        "--allow-endpoint",
        type=endpoint_type("--allow-endpoint"),
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="an agent or translator service that RunEpisodes requests may name (agent_endpoint, "
        "translator_endpoint) besides the two above; repeatable; any other is refused PERMISSION_DENIED",
    )
    parser.add_argument(
        "--peer-simulator",
        type=endpoint_type("--peer-simulator"),
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="another simulator service, e.g. one in its own virtual environment (make .venv-mario); calls about a "
        "subject this one does not serve (its `requires:` modules are missing here) go to the first peer that lists "
        "it; repeatable",
    )
    parser.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="serve only the subjects of this backend (repeatable; default: every subject), e.g. a simulator in its "
        "own environment that serves only what that environment was made for",
    )
    parser.add_argument("--parallelism", type=int, default=64, help="default environments in lock-step (default 64)")
    parser.add_argument(
        "--pipeline",
        type=int,
        default=2,
        help="lock-step groups per batch (default 2: the agent answers one group while the simulator "
        "steps the other; each group still makes one batched call per step; 1 = one call per "
        "step for all environments)",
    )
    parser.add_argument(
        "--agent-lanes",
        choices=["auto", "off"],
        default="auto",
        help="auto (default): where the agent runs on this host, act over a same-host lane it offers (a Unix "
        "socket negotiated with OpenLane, the same messages as ActStream without gRPC's per-message cost), else "
        "over ActStream; off: always ActStream (docs/contracts/lanes.md)",
    )
    add_service_arguments(parser, port=50051, metrics_port=9101)
    add_outgoing_arguments(parser)
    args = parser.parse_args()
    options = options_from_args(args)
    credentials = outgoing_credentials(args)
    try:
        subjects = load_subjects()
    except SubjectError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.backend:
        subjects = {n: s for n, s in subjects.items() if s.backend in args.backend}
        if not subjects:
            raise SystemExit(f"error: no subject has backend {' or '.join(args.backend)}")
    from simulator_service.server import register

    serve(
        "simulator",
        options,
        lambda server: register(
            server,
            subjects,
            args.agent_endpoint,
            args.parallelism,
            args.pipeline,
            credentials=credentials,
            translator_endpoint=args.translator_endpoint,
            allowed_endpoints=args.allow_endpoint,
            peers=args.peer_simulator,
            agent_lanes=args.agent_lanes == "auto",
        ),
    )


if __name__ == "__main__":
    main()
