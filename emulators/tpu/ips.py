"""Loopback addresses for emulated VMs, unique within the process.

The allocator is process-wide so that two emulators in one test process never hand out the
same address, even if they were configured with the same prefix.
"""

from __future__ import annotations

import threading


class AddressesExhausted(RuntimeError):
    pass


class _Pool:
    def __init__(self, prefix: str) -> None:
        fixed = [int(part) for part in prefix.split(".")]
        self._fixed = fixed
        self._free_octets = 4 - len(fixed)
        self._cursor = 0
        self._size = 254 * 256 ** (self._free_octets - 1)

    def _address(self, n: int) -> str:
        # The last octet runs 1..254 so no address ends in .0 or .255.
        last = n % 254 + 1
        rest = n // 254
        middle: list[int] = []
        for _ in range(self._free_octets - 1):
            middle.insert(0, rest % 256)
            rest //= 256
        return ".".join(str(o) for o in [*self._fixed, *middle, last])

    def take(self, taken: set[str]) -> str | None:
        # Hand addresses out round-robin so a released address is reused as late as possible.
        for step in range(self._size):
            n = (self._cursor + step) % self._size
            address = self._address(n)
            # 127.0.0.x is where the emulator's own servers (and everyone else's) listen.
            if address not in taken and not address.startswith("127.0.0."):
                self._cursor = (n + 1) % self._size
                return address
        return None


_lock = threading.Lock()
_pools: dict[str, _Pool] = {}
_in_use: set[str] = set()


def allocate(prefix: str) -> str:
    with _lock:
        pool = _pools.setdefault(prefix, _Pool(prefix))
        address = pool.take(_in_use)
        if address is not None:
            _in_use.add(address)
            return address
    raise AddressesExhausted(f"no free loopback address left under {prefix}")


def release(address: str) -> None:
    with _lock:
        _in_use.discard(address)
