"""A suspended approval is an expected wait, not an error, in the run's log.

Prefect's flow engine ends every run attempt with "Finished in state <state>" on the
`prefect.flow_runs` logger, at ERROR unless the state is Completed, so every approval that
suspends logs `ERROR … Finished in state Suspended(type=PAUSED)`. gpuops installs a filter
on that logger that lowers exactly this line, for a Paused-type state, to INFO; every other
line keeps its level.
"""

from __future__ import annotations

import logging
import re

FLOW_RUN_LOGGER = "prefect.flow_runs"
_FINISHED_PAUSED = re.compile(r"Finished in state \w+\(.*\btype=PAUSED\b.*\)")


class SuspensionIsNotAnError(logging.Filter):
    """Lowers Prefect's ERROR "Finished in state …(type=PAUSED)" to INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and _FINISHED_PAUSED.fullmatch(record.getMessage()):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def log_suspensions_as_info() -> None:
    """Install the filter once in this process (before a run suspends)."""
    logger = logging.getLogger(FLOW_RUN_LOGGER)
    if not any(isinstance(f, SuspensionIsNotAnError) for f in logger.filters):
        logger.addFilter(SuspensionIsNotAnError())
