"""The bearer token keeper presents to spur, from an environment variable or a file.

spur signs its JWTs with the cluster's shared HMAC key; an anonymous caller is accepted outside
`required` mode, so the token is optional. When set it travels only in the `authorization`
call metadata: never in a repr, a log line or an exception message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from domain.common.secret_text import header_secret_problem, scrub

TOKEN_ENV = "KEEPER_SPUR_TOKEN"

Metadata = tuple[tuple[str, str], ...]


class SpurTokenError(ValueError):
    """The configured token cannot be used. The message names the source, never the value."""


class SpurToken:
    """Where the token comes from and its current value.

    With `path`, the file is the source and is re-read whenever its inode, size or mtime
    changes, so a rotated secret (a Kubernetes secret volume swaps a symlink) takes effect on
    the next call without a restart. Without `path`, the environment variable is read once.
    An empty or unset source means anonymous calls.
    """

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        env_var: str = TOKEN_ENV,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._path = Path(path) if path is not None else None
        self._env_var = env_var
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._secret: str | None = None
        if self._path is None:
            raw = (os.environ if environ is None else environ).get(env_var, "")
            self._secret = self._checked(raw)
        else:
            self._refresh()

    @property
    def setting(self) -> str:
        """What an operator should check when spur refuses the token."""
        if self._path is not None:
            return f"the spur token file {self._path}"
        return f"the {self._env_var} environment variable"

    def _checked(self, raw: str) -> str | None:
        # A trailing newline is how most editors and `echo` write a file; it is not the token.
        value = raw.strip()
        if not value:
            return None
        problem = header_secret_problem(value)
        if problem:
            raise SpurTokenError(
                f"the spur token from {self.setting} {problem}; it must be the token alone "
                "(one line, no spaces or control characters)"
            )
        return value

    def _refresh(self) -> None:
        assert self._path is not None
        try:
            st = self._path.stat()
        except OSError as exc:
            raise SpurTokenError(f"{self.setting} cannot be read: {exc.strerror}") from None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return
        try:
            raw = self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise SpurTokenError(f"{self.setting} cannot be read: {reason}") from None
        self._secret = self._checked(raw)
        self._stamp = stamp

    def _current(self) -> str | None:
        if self._path is not None:
            with self._lock:
                self._refresh()
        return self._secret

    @property
    def present(self) -> bool:
        return self._current() is not None

    def metadata(self) -> Metadata | None:
        """The call metadata carrying the token, or None for an anonymous call."""
        secret = self._current()
        if secret is None:
            return None
        return (("authorization", f"Bearer {secret}"),)

    def scrub(self, text: str) -> str:
        """`text` with any form of the token cut out: for server details that echo it."""
        return scrub(text, [self._secret])

    def __repr__(self) -> str:
        return f"SpurToken(source={self.setting!r}, token={'***' if self._secret else None})"

    __str__ = __repr__
