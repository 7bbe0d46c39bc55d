"""The watch family's store: the launch requests keeper keeps out of history."""

from keeper.store.watch.launches import LaunchStore, open_launch_store

__all__ = ["LaunchStore", "open_launch_store"]
