"""Injected faults as the emulators keep them: first in, first out, each good for a number of
calls it matches (`fault.matches(*call)`). Shared by the TPU and GitHub emulators."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar


class Injected(Protocol):
    def matches(self, *call: Any) -> bool: ...

    def model_dump(self) -> dict[str, Any]: ...


F = TypeVar("F", bound=Injected)


class FaultBook(Generic[F]):
    def __init__(self, uses: str) -> None:
        # The fault's field counting the calls it still fails ("count", "times").
        self._uses = uses
        self._faults: list[F] = []

    def add(self, fault: F) -> None:
        self._faults.append(fault)

    def clear(self) -> None:
        self._faults.clear()

    def take(self, *call: Any) -> F | None:
        """Use up one of the first matching fault's uses, and return that fault."""
        for fault in self._faults:
            if fault.matches(*call):
                left = getattr(fault, self._uses) - 1
                setattr(fault, self._uses, left)
                if left == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def to_json(self) -> list[dict[str, Any]]:
        return [fault.model_dump() for fault in self._faults]
