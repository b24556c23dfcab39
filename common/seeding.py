"""Every random choice flows from a campaign seed; these derive sub-seeds stably (no Python hash())."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 32-bit seed determined by the parts (e.g. campaign seed, test-case id, repetition)."""
    digest = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2**32)
