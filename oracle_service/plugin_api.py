"""The oracle service's plug-in surface: what a subject pack's oracles may import.

An oracle is an ``Oracle`` whose ``required_signals`` name the signals it reads (the subject must record them; a
campaign that pairs it with a subject that does not is refused before it starts) and whose ``judge`` turns an
``Episode`` into a ``Judgement``. A pack imports nothing else of the oracle service (an import-linter contract holds
it to this module); the service loads the pack's oracles by name (entry-point group gauntlet.oracles).
"""

from __future__ import annotations

import numpy as np

from oracle_service.oracles import Episode, Judgement, MissingSignals, Oracle

__all__ = ["Episode", "Judgement", "MissingSignals", "Oracle", "flag", "scalar"]


def scalar(episode: Episode, name: str) -> float:
    """The episode-level signal ``name`` as a float."""
    return float(np.asarray(episode.signals[name]).item())


def flag(episode: Episode, name: str) -> bool:
    """The episode-level 0/1 signal ``name`` as a bool."""
    return bool(np.asarray(episode.signals[name]).item())
