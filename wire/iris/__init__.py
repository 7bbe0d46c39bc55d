"""The iris controller's protocol as keeper speaks it: Connect RPC with protobuf JSON bodies.

iris publishes no Python package keeper can depend on, so these are keeper's own pydantic
models of the messages it uses, with upstream's names and field numbers (messages.py), the
JSON mapping rules (codec.py), the Connect paths, codes and error body (connect.py), the
method table (methods.py) and the commands keeper runs inside task containers
(exec_commands.py).
"""
