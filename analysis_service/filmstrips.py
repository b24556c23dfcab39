"""Filmstrips of a campaign's first distinct failures for its report, one per failure cluster first (the distinct
failing inputs clustered as ClusterFailures clusters them: Indago's k-means and silhouette rule, seed 0, k <= 30),
then further distinct failures in asking order if there are fewer clusters than filmstrips: each failure replayed by
the generator
(ReplayExecution with render: the simulator's RenderEpisode, the model acting, the episode's own seed) and its
frames laid side by side in one PNG. Best effort: a failure that cannot be replayed (no agent or oracle reachable,
a subject that cannot render) gets a note instead of a picture, and the report is written all the same."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import numpy as np

from analysis_service.failure_clusters import encode_inputs, select_clustering
from analysis_service.seen_failures import MAX_K, SEED  # the clustering ClusterFailures answers with
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.remote import describe
from common.tensor import from_tensor

FRAMES = 8  # frames per filmstrip, spread over the whole episode
MAX_FILMSTRIPS = 10
FRAME_WIDTH = 160
REPLAY_TIMEOUT_SECONDS = 120


def distinct_failures(failures: Sequence[Mapping[str, Any]], n: int) -> list[tuple[Mapping[str, Any], int]]:
    """``n`` failures with distinct inputs, each with its cluster: the first failure (in asking order) of each
    cluster, clusters in the order their first failure was asked, then the next distinct failures in asking order."""
    seen: set[str] = set()
    unique = []
    for f in failures:
        key = json.dumps(f.get("values"), sort_keys=True, default=str)
        if key in seen or not f.get("test_case_id"):
            continue
        seen.add(key)
        unique.append(f)
    if not unique or n <= 0:
        return []
    labels = [
        int(c)
        for c in select_clustering(
            encode_inputs([dict(f.get("values") or {}) for f in unique]), SEED, max_k=MAX_K
        ).labels
    ]
    firsts: dict[int, int] = {}  # cluster -> its first failure's position
    for i, c in enumerate(labels):
        firsts.setdefault(c, i)
    heads = sorted(firsts.values())
    order = heads + [i for i in range(len(unique)) if i not in set(heads)]
    return [(unique[i], labels[i]) for i in order[:n]]


def strip_png(frames: Sequence[np.ndarray]) -> str:
    """The frames side by side (each shrunk to FRAME_WIDTH pixels wide), as a base64 PNG."""
    from PIL import Image, ImageOps

    images = []
    for f in frames:
        im = Image.fromarray(np.ascontiguousarray(f[:, :, :3], dtype=np.uint8))
        height = max(1, round(im.height * FRAME_WIDTH / im.width))
        images.append(ImageOps.expand(im.resize((FRAME_WIDTH, height)), border=1, fill=(190, 190, 190)))
    gap = 4
    strip = Image.new(
        "RGB", (sum(i.width for i in images) + gap * (len(images) - 1), max(i.height for i in images)), (255, 255, 255)
    )
    x = 0
    for im in images:
        strip.paste(im, (x, 0))
        x += im.width + gap
    buffer = io.BytesIO()
    strip.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def filmstrips(
    generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, failures: Sequence[Mapping[str, Any]], n: int
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(one JSON entry per filmstrip: test_case_id, reason, frames, note; test_case_id -> base64 PNG)."""
    entries: list[dict[str, Any]] = []
    pngs: dict[str, str] = {}
    for f, cluster in distinct_failures(failures, n):
        tid = str(f["test_case_id"])
        entry: dict[str, Any] = {
            "test_case_id": tid,
            "reason": f.get("reason") or "",
            "cluster": cluster,
            "frames": 0,
            "note": "",
        }
        request = generator_pb2.ReplayExecutionRequest(
            campaign_id=campaign_id, test_case_id=tid, render=True, max_frames=FRAMES
        )
        try:
            answers = list(generator.ReplayExecution(request, timeout=REPLAY_TIMEOUT_SECONDS))
        except grpc.RpcError as exc:
            entry["note"] = f"not rendered: {describe(exc)}"[:300]
            entries.append(entry)
            continue
        frames = [from_tensor(a.frame) for a in answers if a.WhichOneof("item") == "frame"]
        if frames:
            pngs[tid] = strip_png(frames[-FRAMES:])
            entry["frames"] = len(frames)
        else:
            entry["note"] = "not rendered: the subject's environment gives no frames"
        if answers and not answers[0].summary.same_verdict:
            entry["note"] = "the replay gave another verdict than the campaign stored"
        entries.append(entry)
    return entries, pngs
