"""Which generator runs a campaign: one owner at a time, by a lease it keeps renewing.

Several generator replicas may share one PostgreSQL store behind one Service. Each running campaign has an owner
(CampaignStore.acquire): the generator that started, resumed or took it over. The owner renews its lease every
third of its length; a replica takes a campaign over only once that lease ran out on the database's clock (the
owner died, or lost the store), and the takeover raises the campaign's fence, so every later write of the old
owner is refused (StaleOwner) and it stops. A generator that stops gracefully gives its campaigns back at once.

On one host the wait is cut short: an owner id names its host and process, and a process of this host that no
longer runs cannot write, so its campaigns are taken at once (a local suite's restarted generator, a container
restarted in its pod). Ids must be unique per running generator: GAUNTLET_GENERATOR_ID (the pod name under
Kubernetes) or host/pid/random.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

import sqlalchemy as sa

from generator_service.store import CampaignStore, Lease

log = logging.getLogger("generator")
OWNER_ENV = "GAUNTLET_GENERATOR_ID"
DEFAULT_LEASE_SECONDS = 30.0


def owner_id() -> str:
    """This generator's owner id: $GAUNTLET_GENERATOR_ID, else host/pid/random."""
    explicit = os.environ.get(OWNER_ENV, "").strip()
    if explicit:
        return explicit[:200]
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def gone(owner: str, me: str) -> bool:
    """True when `owner` is a generator process of this host that no longer runs (its lease need not be waited
    out): its pid is dead, or it is this process's pid under another id (a restarted container's pid 1)."""
    parts = owner.split("/")
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return owner != me
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


class LeaseKeeper:
    """Renews the leases this generator holds; tells `on_lost` about one another generator took and `on_cancel`
    about one a CancelCampaign on another replica asked to cancel; between renewals runs `adopt` (take over the
    campaigns whose owner is gone), when given."""

    def __init__(
        self,
        store: CampaignStore,
        lease_seconds: float,
        on_lost: Callable[[str], None],
        on_cancel: Callable[[str], None],
    ) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.on_lost = on_lost
        self.on_cancel = on_cancel
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        with self._lock:
            self._leases[lease.campaign_id] = lease

    def drop(self, campaign_id: str) -> None:
        with self._lock:
            self._leases.pop(campaign_id, None)

    def start(self, adopt: Callable[[], object] | None) -> None:
        self._thread = threading.Thread(target=self._loop, args=(adopt,), name="lease-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def renew_all(self) -> None:
        with self._lock:
            held = list(self._leases.values())
        for lease in held:
            try:
                kept = self.store.renew(lease, self.lease_seconds)
            except sa.exc.SQLAlchemyError as exc:  # the store is down: the fence keeps a late write out
                log.warning("cannot renew the lease of campaign %s: %s", lease.campaign_id, type(exc).__name__)
                continue
            if not kept:
                log.warning("campaign %s was taken over by another generator; stopping it here", lease.campaign_id)
                self.drop(lease.campaign_id)
                self.on_lost(lease.campaign_id)
        with self._lock:
            held = list(self._leases.values())
        try:
            cancelled = self.store.cancels_requested(held)
        except sa.exc.SQLAlchemyError:
            return
        for campaign_id in cancelled:
            log.info("campaign %s: cancelled through another generator", campaign_id)
            self.on_cancel(campaign_id)

    def _loop(self, adopt: Callable[[], object] | None) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            self.renew_all()
            if adopt is not None:
                try:
                    adopt()
                except Exception:  # the next round tries again
                    log.exception("taking over campaigns failed")
