"""What a DESIGNATE campaign's archive costs to list: the generator's ListArchive, and a report's reading of it.

A DESIGNATE archive has no table: the generator rebuilds it by replaying the stored batches through a fresh strategy
(generator_service/archive_listing.py). This bench runs one campaign of the ``single`` variant (it keeps every
relevant image: the largest archive, ~1,100 members at the paper's 100 generations) on a local suite, then times,
each ``--repeats`` times, through the generator's contract:

* listing   ListArchive without images (what ``gauntlet designate archive`` streams): one replay;
* two_calls what a report did before issue 30: ListArchive with images, cancelled after the first ``--images``
            members, then ListArchive without images for every member (two replays);
* one_call  what a report does now: ListArchive with images and max_images = ``--images`` (one replay, those
            members rendered, the rest streamed as stored).

Writes results/bench/designate_archive_listing.json and ends with
    designate_archive_listing: members=<n> listing_s=<median> two_calls_s=<median> one_call_s=<median>
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch

from bench.harness import run_campaign
from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.api import CampaignConfig


def _members(stream: object, cancel_after: int | None = None) -> tuple[int, int]:
    """(members, members with images) read from a ListArchive stream, cancelling it after ``cancel_after``."""
    members = images = 0
    for response in stream:  # type: ignore[attr-defined]
        if response.WhichOneof("item") != "member":
            continue
        members += 1
        images += response.member.HasField("image")
        if cancel_after is not None and members >= cancel_after:
            stream.cancel()  # type: ignore[attr-defined]
            break
    return members, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--images", type=int, default=24, help="members the report re-renders")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not 1 <= args.generations <= 1000 or not 1 <= args.images <= 1000 or not 1 <= args.repeats <= 20:
        parser.error("--generations in [1, 1000], --images in [1, 1000], --repeats in [1, 20]")
    torch.set_num_threads(1)
    with BenchRecord("designate_archive_listing") as record, TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/listing.db"
        with LocalSuite(store_url=url, log_dir=Path(tmp) / "logs") as local:
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
            config = CampaignConfig.model_validate(
                {
                    "name": "archive-listing",
                    "subject": "urban",
                    "model": "segnet-urban",
                    "strategy": "designate",
                    "strategy_params": {"variant": "single", "generations": args.generations},
                    "oracle": "iou_car",
                    "seed": 1,
                    "budget": {"max_executions": 100_000},
                    "batch_size": 60,
                    "parallelism": 12,
                }
            )
            started = time.perf_counter()
            campaign = run_campaign(gen, config).campaign_id
            record.metrics["campaign_s"] = round(time.perf_counter() - started, 1)
            plain = generator_pb2.ListArchiveRequest(campaign_id=campaign)
            rendered = generator_pb2.ListArchiveRequest(campaign_id=campaign, include_images=True)
            capped = generator_pb2.ListArchiveRequest(campaign_id=campaign, include_images=True, max_images=args.images)
            listing, two_calls, one_call, members = [], [], [], 0
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                members, _ = _members(gen.ListArchive(plain, timeout=600))
                listing.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                _, first = _members(gen.ListArchive(rendered, timeout=600), cancel_after=args.images)
                again, _ = _members(gen.ListArchive(plain, timeout=600))
                two_calls.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                once, with_images = _members(gen.ListArchive(capped, timeout=600))
                one_call.append(time.perf_counter() - t0)
                wanted = min(args.images, members)
                assert again == once == members and first == with_images == wanted, "the listings differ"
        record.metrics.update(
            {
                "members": members,
                "generations": args.generations,
                "images": args.images,
                "listing_s": round(statistics.median(listing), 2),
                "two_calls_s": round(statistics.median(two_calls), 2),
                "one_call_s": round(statistics.median(one_call), 2),
                "listing_runs_s": " ".join(f"{x:.2f}" for x in listing),
                "two_calls_runs_s": " ".join(f"{x:.2f}" for x in two_calls),
                "one_call_runs_s": " ".join(f"{x:.2f}" for x in one_call),
            }
        )
    m = record.metrics
    print(
        f"designate_archive_listing: members={m['members']} listing_s={m['listing_s']} "
        f"two_calls_s={m['two_calls_s']} one_call_s={m['one_call_s']}"
    )


if __name__ == "__main__":
    main()
