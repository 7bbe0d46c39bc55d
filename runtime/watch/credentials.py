"""The bearer token keeper presents to the iris controller, from an environment variable or a
file.

iris accepts anonymous callers when its auth is off, so the token is optional. When set it
travels only in the `Authorization` header: never in a repr, a log line or an error message
(runtime/secret_source.py).
"""

from __future__ import annotations

from keeper.runtime.secret_source import SecretError, SecretSource

TOKEN_ENV = "KEEPER_IRIS_TOKEN"


class IrisTokenError(SecretError):
    """The configured token cannot be used. The message names the source, never the value."""


class IrisToken(SecretSource):
    """Where the token comes from and its current value; empty or unset means anonymous."""

    what = "the iris token"
    env_var = TOKEN_ENV
    error = IrisTokenError

    @classmethod
    def anonymous(cls) -> IrisToken:
        return cls(environ={})

    @property
    def setting(self) -> str:
        """What an operator should check when iris refuses the token."""
        if self._path is not None:
            return f"the iris token file {self._path} (watch.token_file)"
        return super().setting

    def headers(self) -> dict[str, str]:
        """The header carrying the token, or none for an anonymous call."""
        secret = self.current()
        return {} if secret is None else {"Authorization": f"Bearer {secret}"}
