"""How iris messages map to protobuf JSON, the encoding of the Connect protocol keeper speaks.

| protobuf            | on the wire (output)            | accepted on input                     |
|---------------------|---------------------------------|---------------------------------------|
| field `task_id`     | `"taskId"` (lowerCamelCase)     | `"taskId"` or `"task_id"`             |
| enum                | its name, `"TASK_STATE_RUNNING"`| the name, the bare name, a number     |
| int64               | a decimal string, `"17"`        | a string or a number                  |
| bytes               | standard base64                 | standard or URL-safe, padded or not   |
| an unset field      | absent                          | absent or `null`: the default         |
| an unknown field    | (never written)                 | ignored (kept by open messages)       |

The protos use explicit presence (`edition = "2023"`): a field is written when it was set,
even to zero, and left out when it was not. `to_wire` follows that by writing the fields a
model was built or parsed with, so a parsed message written back is the message received.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from enum import IntEnum
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

M = TypeVar("M", bound=BaseModel)
E = TypeVar("E", bound="WireEnum")


def number(n: int, default: Any = None, *, factory: Any = None) -> Any:
    """A field with its protobuf field number recorded as `= n` (see `field_number`)."""
    if factory is not None:
        return Field(default_factory=factory, description=f"= {n}")
    return Field(default, description=f"= {n}")


def field_number(cls: type[BaseModel], name: str) -> int:
    """The protobuf field number of `cls.name`, as `number` recorded it."""
    description = cls.model_fields[name].description or ""
    if not description.startswith("= "):
        raise KeyError(f"{cls.__name__}.{name} has no field number")
    return int(description[2:])


class WireEnum(IntEnum):
    """A protobuf enum: members carry the short name, the wire carries prefix + name.

    Parsing is tolerant, because iris versions drift: an unknown name or number (a state a
    newer controller added) reads as the zero member rather than failing the whole message.
    """

    @classmethod
    def wire_prefix(cls) -> str:
        return ""

    @classmethod
    def aliases(cls) -> Mapping[str, str]:
        """Other spellings seen on the wire, upper-cased, to the member name."""
        return {}

    @property
    def wire_name(self) -> str:
        return f"{self.wire_prefix()}{self.name}"

    @classmethod
    def _spellings(cls) -> dict[str | int, Self]:
        """The exact spellings seen on the wire (the prefixed and bare names, the aliases, the
        numbers), each to the member the spelled-out rules (`_parse_spelled`) read it as.
        Built once per enum."""
        table: dict[str | int, Self] | None = cls.__dict__.get("_wire_spellings")
        if table is None:
            spellings: list[str | int] = [*cls.aliases()]
            for member in cls:
                spellings += [member.wire_name, member.name, int(member)]
            table = {spelling: cls._parse_spelled(spelling) for spelling in spellings}
            type.__setattr__(cls, "_wire_spellings", table)
        return table

    @classmethod
    def parse(cls, value: object) -> Self:
        # The spellings a controller sends, looked up at once (a check parses hundreds).
        if type(value) is str or type(value) is int:
            member = cls._spellings().get(value)
            if member is not None:
                return member
        return cls._parse_spelled(value)

    @classmethod
    def _parse_spelled(cls, value: object) -> Self:
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            raise ValueError(f"{cls.__name__} cannot be a boolean")
        if isinstance(value, int):
            return cls._of_number(value)
        if isinstance(value, str):
            text = value.strip()
            if text.lstrip("-").isdigit():
                return cls._of_number(int(text))
            name = text.upper()
            prefix = cls.wire_prefix()
            if prefix and name.startswith(prefix):
                name = name[len(prefix) :]
            name = cls.aliases().get(name, name)
            member = cls.__members__.get(name)
            return member if member is not None else cls(0)
        raise ValueError(f"{cls.__name__} must be a name or a number, not {type(value).__name__}")

    @classmethod
    def _of_number(cls, value: int) -> Self:
        try:
            return cls(value)
        except ValueError:
            return cls(0)


def wire_enum(cls: type[E]) -> Any:
    """The annotated type of a field holding `cls`: parsed by `cls.parse`, written by name."""
    return Annotated[
        cls,
        BeforeValidator(cls.parse),
        PlainSerializer(lambda member: member.wire_name, return_type=str, when_used="json"),
    ]


# int64 and uint64 travel as decimal strings in protobuf JSON (a JavaScript number cannot
# hold them); pydantic's lax int already accepts "17" on input.
Int64 = Annotated[int, PlainSerializer(str, return_type=str, when_used="json")]


def _decode_base64(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        text = value.strip().replace("-", "+").replace("_", "/")
        text += "=" * (-len(text) % 4)
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise ValueError("not base64") from exc
    return value


B64Bytes = Annotated[
    bytes,
    BeforeValidator(_decode_base64),
    PlainSerializer(
        lambda data: base64.b64encode(data).decode("ascii"), return_type=str, when_used="json"
    ),
]


def _drop_nulls(data: Any) -> Any:
    # protobuf JSON reads `null` as "not set"; pydantic would reject it for a scalar.
    if type(data) is dict and None not in data.values():
        return data  # checked in C first: a controller's answer seldom holds a null
    if isinstance(data, Mapping):
        return {key: value for key, value in data.items() if value is not None}
    return data


class WireMessage(BaseModel):
    """A protobuf message in its JSON mapping. Unknown fields are ignored on input."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_unset(cls, data: Any) -> Any:
        return _drop_nulls(data)


class OpenWireMessage(WireMessage):
    """A message that keeps every field it received, known or not, and writes them back:
    for a request keeper must resend exactly as the controller stored it."""

    model_config = ConfigDict(extra="allow")


def to_wire(message: BaseModel, *, include_defaults: bool = False) -> dict[str, Any]:
    """The protobuf JSON object of `message`: the fields it was built or parsed with (with
    `include_defaults`, every declared field, as a server that always emits them would)."""
    return message.model_dump(
        mode="json", by_alias=True, exclude_unset=not include_defaults, exclude_none=True
    )


def from_wire(cls: type[M], data: Mapping[str, Any] | None) -> M:
    """`cls` parsed from a protobuf JSON object (an empty body is the default message)."""
    return cls.model_validate(dict(data or {}))
