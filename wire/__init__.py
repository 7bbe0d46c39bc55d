"""Wire formats of the systems keeper speaks, as keeper's own definitions of the subset it uses.

Each subpackage holds a `.proto` written for keeper with the upstream package, service,
message and field names and numbers, so its messages are byte-compatible with the real
system's, and the stubs generated from it (`make proto`; docs/reclaim.md#wire-format).
"""
