"""JSON bodies of the emulators' control APIs: parse into a model, or answer 400 naming
the field, and the one way a control call's failure is answered. Shared by the emulators."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class BadRequest(Exception):
    """Carries the 400 answer out of a handler; the control API's middleware returns it."""

    def __init__(self, response: web.Response) -> None:
        self.response = response


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


async def parse(request: web.Request, model: type[M]) -> M:
    try:
        body = await request.json() if request.can_read_body else {}
    except json.JSONDecodeError:
        raise BadRequest(error(400, "body is not valid JSON")) from None
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        fields = [".".join(str(p) for p in err["loc"]) or "body" for err in exc.errors()]
        detail = "; ".join(
            f"{field}: {err['msg']}" for field, err in zip(fields, exc.errors(), strict=True)
        )
        raise BadRequest(error(400, f"invalid field {detail}", fields=fields)) from None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NO_STATUSES: Mapping[type[Exception], int] = MappingProxyType({})


def error_middleware(
    statuses: Mapping[type[Exception], int] = NO_STATUSES,
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """A failed control call as `{"error": ...}`: a BadRequest's own answer, an emulator
    exception by `statuses` (first match), an HTTP error as it is, a ValueError as 400."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadRequest as bad:
            return bad.response
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error(exc.status, exc.reason)
        except Exception as exc:
            for kind, status in statuses.items():
                if isinstance(exc, kind):
                    return error(status, str(exc))
            if isinstance(exc, ValueError):
                return error(400, str(exc))
            raise

    return errors
