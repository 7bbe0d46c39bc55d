"""JSON bodies of the emulators' control APIs: parse into a model, or answer 400 naming
the field. Shared by the TPU and GitHub emulators."""

from __future__ import annotations

import json
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
