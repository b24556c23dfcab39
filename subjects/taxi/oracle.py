"""The taxi pack's oracle (oracle role): taxi_fault, the QD fault-diversity paper's faults.

It reads the episode signals taxi_large.yaml declares (set by env.py): ``crash``, ``illegal_action``, ``delivered``,
``moves_before_pickup`` and ``moves_after_pickup``.
"""

from __future__ import annotations

from oracle_service.plugin_api import Episode, Judgement, Oracle, flag, scalar


def _taxi(ep: Episode) -> Judgement:
    # QD fault-diversity paper: a fault is an illegal pick-up/drop-off or a collision with a wall (the
    # simulator ends test episodes at the first one). A timeout without a fault passes.
    # Margin (ours; the paper has none): 1.0 delivered, 0.0 timed out without a fault, -1.0 a fault.
    descriptors = (scalar(ep, "moves_before_pickup"), scalar(ep, "moves_after_pickup"))
    crash, illegal = flag(ep, "crash"), flag(ep, "illegal_action")
    if crash or illegal:
        what = " and ".join(
            w
            for w, f in (("moved into a wall or off the grid", crash), ("made an illegal pick-up or drop-off", illegal))
            if f
        )
        return Judgement(True, -1.0, descriptors, f"the taxi {what} (episode ended after {ep.steps} steps)")
    if flag(ep, "delivered"):
        return Judgement(False, 1.0, descriptors, f"delivered the passenger after {ep.steps} steps")
    return Judgement(False, 0.0, descriptors, f"no fault, but the passenger was not delivered within {ep.steps} steps")


TAXI_FAULT = Oracle(
    "taxi_fault",
    "Taxi fails on an illegal pick-up/drop-off or a move into a wall (QD fault-diversity paper); "
    "a timeout without a fault passes.",
    ("crash", "illegal_action", "delivered", "moves_before_pickup", "moves_after_pickup"),
    ("moves_before_pickup", "moves_after_pickup"),
    "1.0 delivered, 0.0 timed out without a fault, -1.0 a fault (illegal action or crash)",
    _taxi,
)
