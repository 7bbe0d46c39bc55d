"""A secret keeper reads from an environment variable or a file, and never shows.

Tokens (spur, iris) and webhook URLs all come this way. With a file, it is re-read whenever
its inode, size or mtime changes, so a rotated secret (a Kubernetes secret volume swaps a
symlink) takes effect on the next use without a restart; the variable is read once. An empty
or unset source means none. The value is in no repr, log line or exception message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from keeper.domain.common.secret_text import header_secret_problem, scrub


class SecretError(ValueError):
    """The configured secret cannot be used. The message names the source, never the value."""


class SecretSource:
    # What the secret is, in messages ("the spur token"), the variable it comes from unless
    # told otherwise, and the error it raises; subclasses name theirs.
    what = "the secret"
    env_var = ""
    error: type[SecretError] = SecretError

    def __init__(
        self,
        *,
        env_var: str | None = None,
        path: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._path = Path(path) if path is not None else None
        self._env_var = env_var or self.env_var
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._secret: str | None = None
        if self._path is None:
            raw = (os.environ if environ is None else environ).get(self._env_var, "")
            self._secret = self._checked(raw)
        else:
            self._refresh()

    @property
    def setting(self) -> str:
        """What an operator should check when the secret is refused."""
        if self._path is not None:
            return f"{self.what} file {self._path}"
        return f"the {self._env_var} environment variable"

    def _checked(self, raw: str) -> str | None:
        # A trailing newline is how most editors and `echo` write a file; it is not the secret.
        value = raw.strip()
        if not value:
            return None
        problem = header_secret_problem(value)
        if problem:
            raise self.error(
                f"{self.what} from {self.setting} {problem}; it must be the value alone "
                "(one line, no spaces or control characters)"
            )
        return value

    def _refresh(self) -> None:
        assert self._path is not None
        try:
            st = self._path.stat()
        except OSError as exc:
            raise self.error(f"{self.setting} cannot be read: {exc.strerror}") from None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return
        try:
            raw = self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise self.error(f"{self.setting} cannot be read: {reason}") from None
        self._secret = self._checked(raw)
        self._stamp = stamp

    def current(self) -> str | None:
        """The secret now (a file re-read if it changed), or None."""
        if self._path is not None:
            with self._lock:
                self._refresh()
        return self._secret

    @property
    def present(self) -> bool:
        return self.current() is not None

    def scrub(self, text: str) -> str:
        """`text` with any form of the secret cut out: for answers that echo it."""
        return scrub(text, [self._secret])

    def __repr__(self) -> str:
        hidden = "***" if self._secret else None
        return f"{type(self).__name__}(source={self.setting!r}, value={hidden})"

    __str__ = __repr__


SecretSourceT = TypeVar("SecretSourceT", bound=SecretSource)


def from_env_or_file(
    cls: type[SecretSourceT],
    env_var: str,
    path: Path | None,
    env: Mapping[str, str] | None = None,
) -> SecretSourceT:
    """The variable wins over the file; with neither, no secret."""
    env = os.environ if env is None else env
    if env.get(env_var, "").strip() or path is None:
        return cls(env_var=env_var, environ=env)
    return cls(env_var=env_var, path=path)
