"""JSON bodies of the emulators' control APIs: parse into a model, or answer 400 naming
the field, and the one way a control call's failure is answered. Shared by the emulators."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, ValidationError

from emulators.faults import FaultBook

M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    """A control call's JSON body: a field the emulator does not know is a 400, not ignored."""

    model_config = ConfigDict(extra="forbid")


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


def answer(reply: Callable[[web.Request], Any]) -> Handler:
    """A control call with no body: it answers `reply(request)` as JSON."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(reply(request))

    return handler


def error_middleware(
    statuses: Mapping[type[Exception], int] = MappingProxyType({}), prefix: str = ""
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """A failed control call (a path under `prefix`) as `{"error": ...}`: a BadRequest's own
    answer, an emulator exception by `statuses` (first match), an HTTP error as it is, a
    ValueError as 400."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(prefix):
            return await handler(request)
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
                    # A KeyError's str() is the repr of its key: the message is its argument.
                    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                    return error(status, str(message))
            if isinstance(exc, ValueError):
                return error(400, str(exc))
            raise

    return errors


def fault_routes(
    path: str, model: type[BaseModel], book: Callable[[web.Request], FaultBook[Any]]
) -> list[web.RouteDef]:
    """POST `path` queues a fault (201, answering it); DELETE `path` clears them all."""

    async def add(request: web.Request) -> web.Response:
        fault = await parse(request, model)
        book(request).add(fault)
        return web.json_response({"fault": fault.model_dump()}, status=201)

    async def clear(request: web.Request) -> web.Response:
        book(request).clear()
        return web.json_response({"faults": []})

    return [web.post(path, add), web.delete(path, clear)]
