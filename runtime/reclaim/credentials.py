"""The bearer token keeper presents to spur, from an environment variable or a file.

spur signs its JWTs with the cluster's shared HMAC key; an anonymous caller is accepted outside
`required` mode, so the token is optional. When set it travels only in the `authorization`
call metadata: never in a repr, a log line or an exception message (runtime/secret_source.py).
"""

from __future__ import annotations

from keeper.runtime.secret_source import SecretError, SecretSource

TOKEN_ENV = "KEEPER_SPUR_TOKEN"

Metadata = tuple[tuple[str, str], ...]


class SpurTokenError(SecretError):
    """The configured token cannot be used. The message names the source, never the value."""


class SpurToken(SecretSource):
    """Where the spur token comes from and its current value."""

    what = "the spur token"
    env_var = TOKEN_ENV
    error = SpurTokenError

    def metadata(self) -> Metadata | None:
        """The call metadata carrying the token, or None for an anonymous call."""
        secret = self.current()
        if secret is None:
            return None
        return (("authorization", f"Bearer {secret}"),)
