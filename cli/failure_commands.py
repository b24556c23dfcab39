"""`gauntlet replay`: one stored execution run again through the generator's ReplayExecution, its verdict compared
with the stored one, and (--render) its episode written as an animation."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rich.markup import escape

from cli.commands import _rpc, console, suite
from cli.errors import UserError
from common.generated.gauntlet.v1 import analysis_pb2, generator_pb2, generator_pb2_grpc
from common.tensor import from_tensor

# GIF and WebP: Pillow; MP4 (H.264): the ffmpeg binary imageio-ffmpeg ships (both declared in the cli extra)
ANIMATION_SUFFIXES = (".gif", ".webp", ".mp4")
FRAME_MILLISECONDS = 50
VERDICTS = {0: "unspecified", 1: "pass", 2: "fail", 3: "invalid"}
REPLAY_TIMEOUT_SECONDS = 900
EXPORT_ROLES = frozenset({"generator", "analysis"})  # reading the store: no simulator, agent or oracle
PASS, FAIL = 1, 2  # gauntlet.v1 VerdictKind


class VerdictChanged(UserError):
    """The replayed verdict differs from the stored one (exit code 1)."""

    exit_code = 1


def check_animation_path(path: Path) -> Path:
    if path.suffix.lower() not in ANIMATION_SUFFIXES:
        raise UserError(f"--render {path}: the file must end in .gif, .webp or .mp4 (an animation or a video)")
    if not path.parent.exists():
        raise UserError(f"--render {path}: folder {path.parent} does not exist")
    return path


def write_animation(path: Path, frames: list[np.ndarray]) -> None:
    """An animated GIF or WebP of the frames (Pillow), looping, or an MP4 video; 20 frames a second."""
    from PIL import Image

    if path.suffix.lower() == ".mp4":
        write_video(path, frames)
        return

    images = [Image.fromarray(f) for f in frames]
    if path.suffix.lower() == ".gif":  # one shared palette keeps the file small and the colours steady
        images = [im.convert("P", palette=Image.Palette.ADAPTIVE) for im in images]
    images[0].save(path, save_all=True, append_images=images[1:], duration=FRAME_MILLISECONDS, loop=0)


def write_video(path: Path, frames: list[np.ndarray]) -> None:
    """An H.264 MP4 of the frames (yuv420p, which players expect: frames padded with black to even sizes)."""
    import imageio_ffmpeg

    height, width = frames[0].shape[:2]
    even_h, even_w = height + height % 2, width + width % 2
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (even_w, even_h),
        fps=1000 / FRAME_MILLISECONDS,
        codec="libx264",
        pix_fmt_out="yuv420p",
        macro_block_size=2,
        ffmpeg_log_level="error",
    )
    writer.send(None)  # start the encoder
    try:
        for f in frames:
            padded = np.zeros((even_h, even_w, 3), dtype=np.uint8)
            padded[: f.shape[0], : f.shape[1]] = f[:, :, :3]
            writer.send(padded)
    finally:
        writer.close()


def cmd_replay(args: argparse.Namespace) -> None:
    if args.max_frames is not None and not 1 <= args.max_frames <= 1000:
        raise UserError(f"--max-frames must be in [1, 1000] (got {args.max_frames})")
    out = check_animation_path(args.render) if args.render else None
    with suite(args) as connection:
        generator = connection.generator()
        request = generator_pb2.ReplayExecutionRequest(
            campaign_id=args.campaign_id,
            test_case_id=args.test_case_id,
            render=out is not None,
            max_frames=args.max_frames or 0,
        )
        with console.status(f"replaying {args.test_case_id} of campaign {args.campaign_id}..."):
            responses = _rpc(lambda: list(generator.ReplayExecution(request, timeout=REPLAY_TIMEOUT_SECONDS)))
    summary = responses[0].summary
    frames = [from_tensor(r.frame) for r in responses[1:] if r.WhichOneof("item") == "frame"]
    _print(args.campaign_id, summary)
    if out is not None:
        if not frames:
            raise UserError(f"the simulator returned no frames for {args.test_case_id}: its subject cannot render")
        write_animation(out, frames)
        console.print(
            f"animation: [bold]{escape(str(out))}[/bold] ({len(frames)} frames of repetition "
            f"{summary.rendered_repetition}, {frames[0].shape[1]}x{frames[0].shape[0]})"
        )
    if not summary.same_verdict:
        stored, now = VERDICTS[summary.stored.verdict], VERDICTS[summary.replayed.verdict]
        raise VerdictChanged(
            f"the replay of {args.test_case_id} gave {now}, the campaign stored {stored}: this subject or model is "
            "not deterministic given (test case, seed); rerun it a few times to estimate how often it fails"
        )


def _print(campaign_id: str, s: generator_pb2.ReplaySummary) -> None:
    case = s.stored.test_case
    seeds = ", ".join(str(x) for x in s.episode_seeds)
    console.print(
        f"replay [bold]{escape(case.id)}[/bold] of campaign {escape(campaign_id)}: {escape(s.subject)} with "
        f"{escape(s.model)}, oracle {escape(s.oracle)}, campaign seed {s.campaign_seed}, "
        f"episode seed{'s' if len(s.episode_seeds) > 1 else ''} {seeds}",
        highlight=False,
    )
    for label, e in (("stored", s.stored), ("replayed", s.replayed)):
        reason = f": {e.reason}" if e.reason else ""
        reps = f" ({e.failed_repetitions}/{e.repetitions} repetitions failed)" if e.repetitions > 1 else ""
        console.print(
            f"  {label:<8} {VERDICTS[e.verdict]}{escape(reason)}, {e.steps} steps, margin {e.margin:.4g}{reps}",
            highlight=False,
        )
    console.print("  same verdict" if s.same_verdict else "  [red]the verdict differs[/red]")


def cmd_export(args: argparse.Namespace) -> None:
    import yaml

    from cli.regression import list_executions, regression_campaign

    if args.out.suffix.lower() not in (".yaml", ".yml"):
        raise UserError(f"--out {args.out}: a campaign file ends in .yaml or .yml")
    if not args.out.parent.exists():
        raise UserError(f"--out {args.out}: folder {args.out.parent} does not exist")
    with suite(args, roles=EXPORT_ROLES) as connection:
        generator = connection.generator()
        request = generator_pb2.GetCampaignRequest(campaign_id=args.campaign_id)
        status = _rpc(lambda: generator.GetCampaign(request, timeout=60)).status
        executions = _rpc(list_executions, generator, args.campaign_id)
    wanted = FAIL if args.failures else None
    chosen = [e for e in executions if e.verdict == wanted or (wanted is None and e.verdict in (PASS, FAIL))]
    if not chosen:
        what = "failing executions" if args.failures else "judged executions"
        raise UserError(f"campaign {args.campaign_id} has no {what} to export")
    data = regression_campaign(status, chosen, args.model)
    what = "failures" if args.failures else "executions"
    header = (
        f"# Regression campaign: the {len(chosen)} {what} of campaign {args.campaign_id} "
        f"({status.spec.subject}, {status.spec.model.name}), each rerun with its episode seeds.\n"
        "# `gauntlet run` of this file exits 0 when every input passes, 1 naming those that still fail.\n"
    )
    args.out.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120))
    console.print(
        f"wrote {escape(str(args.out))}: {len(chosen)} {what} of {escape(args.campaign_id)} against model "
        f"{escape(data['campaign']['model'])}; run it with: gauntlet run {escape(str(args.out))}",
        highlight=False,
    )


def _chosen_failures(
    args: argparse.Namespace, generator: generator_pb2_grpc.GeneratorServiceStub, verb: str
) -> list[str]:
    """The ids a failure command works on: those given, else the campaign's first --first distinct failures."""
    from cli.regression import list_executions
    from cli.shrinking import failing_ids

    ids = list(args.test_case_ids) or failing_ids(_rpc(list_executions, generator, args.campaign_id), args.first)
    if not ids:
        raise UserError(f"campaign {args.campaign_id} has no failure to {verb}")
    return ids


def cmd_shrink(args: argparse.Namespace) -> None:
    from cli.shrinking import shrink_and_print

    if not 1 <= args.max_executions <= 1000:
        raise UserError(f"--max-executions must be in [1, 1000] (got {args.max_executions})")
    if args.first < 1:  # refused before any service starts
        raise UserError(f"--first must be >= 1 (got {args.first})")
    with suite(args) as connection:
        generator = connection.generator()
        ids = _chosen_failures(args, generator, "shrink")
        _rpc(shrink_and_print, console, generator, args.campaign_id, ids, args.max_executions)


def cmd_rerun(args: argparse.Namespace) -> None:
    from cli.trust import rerun_and_print

    if not 2 <= args.runs <= 100:
        raise UserError(f"--runs must be in [2, 100] (got {args.runs})")
    if args.first < 1:  # refused before any service starts
        raise UserError(f"--first must be >= 1 (got {args.first})")
    with suite(args) as connection:
        generator = connection.generator()
        ids = _chosen_failures(args, generator, "rerun")
        _rpc(rerun_and_print, console, generator, args.campaign_id, ids, args.runs)


def cmd_failures(args: argparse.Namespace) -> None:
    with suite(args, roles=EXPORT_ROLES) as connection:
        analysis = connection.analysis()
        request = analysis_pb2.ClusterFailuresRequest(campaign_id=args.campaign_id, against=args.against)
        answer = _rpc(lambda: analysis.ClusterFailures(request, timeout=600))
    print_clustered(args.campaign_id, answer)


def print_clustered(campaign_id: str, answer: analysis_pb2.ClusterFailuresResponse) -> None:
    """One line per distinct failure, new or seen before (and where), each followed by its replay command."""
    seen = sum(f.seen_before for f in answer.failures)
    against = ", ".join(answer.against) or "none"
    console.print(
        f"campaign {escape(campaign_id)}: {len(answer.failures)} distinct failures, {len(answer.failures) - seen} new, "
        f"{seen} seen before; {len(answer.earlier)} distinct failures of earlier campaigns ({escape(against)}), "
        f"{answer.clusters} clusters in all",
        highlight=False,
    )
    for f in answer.failures:
        where = f" (like {f.seen_campaign_id} {f.seen_test_case_id})" if f.seen_before else ""
        label = "seen before" if f.seen_before else "new"
        console.print(
            f"  {f.test_case_id} {label}, cluster {f.cluster}{escape(where)}: {escape(f.reason)}", highlight=False
        )
        console.print(f"    {escape(f.replay)}", highlight=False)
