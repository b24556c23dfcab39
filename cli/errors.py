"""The errors a `gauntlet` command ends with: one line on stderr (`error: <message>`) and an exit code, never a
traceback (cli/main.py prints them)."""

from __future__ import annotations


class UserError(Exception):
    """Printed as `error: <message>` with exit code 2, never with a traceback."""

    exit_code = 2


class CampaignNotCompleted(UserError):
    """The campaign ended failed, interrupted or cancelled: its report is written, the exit code says which."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
