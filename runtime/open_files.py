"""The process's open-file limit: what bounds the sockets one worker holds open at once."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_open_files_limit() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard one and returns the soft limit after.

    The soft limit is often 1,024 while the hard one allows far more; an unprivileged
    process may raise its own soft limit up to the hard one. An infinite hard limit is
    left alone (the soft one cannot be set to it on every system).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as err:
            log.warning("open-file limit stays at %d (hard %d): %s", soft, hard, err)
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft
