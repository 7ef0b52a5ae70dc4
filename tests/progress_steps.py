"""Collect a reproduction's step messages from the ProgressUpdates it reports."""

from __future__ import annotations

from collections.abc import Callable

from islands.progress import ProgressUpdate


def collect_steps(messages: list[str]) -> Callable[[ProgressUpdate], None]:
    """Return a progress callback appending each step's message (not start or finish)."""
    def on_update(update: ProgressUpdate) -> None:
        if update.done and not update.finished:
            messages.append(update.info)

    return on_update
