"""Wire formats of the systems keeper speaks, as keeper's own definitions of the subset it uses.

Each subpackage keeps the upstream package, service, message and field names and numbers, so
its messages are compatible with the real system's: `wire/spur` as a `.proto` and the stubs
generated from it (gRPC; `make proto`, docs/reclaim.md#wire-format), `wire/iris` as pydantic
models of iris's Connect-JSON mapping (docs/watch.md#wire-format).
"""
