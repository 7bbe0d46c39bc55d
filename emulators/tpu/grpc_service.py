"""gRPC front end: google.cloud.tpu.v2.Tpu and google.longrunning.Operations.

Served with generic handlers and the proto-plus (de)serialisers, so the real
TpuAsyncClient talks to it unchanged. Every call is counted, re-evaluates the world first
(lazy transitions), and may be failed by an injected fault.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from emulators.faults import FaultBook
from emulators.tpu.faults import Fault
from emulators.tpu.state import ApiError, World

TPU_SERVICE = "google.cloud.tpu.v2.Tpu"
OPERATIONS_SERVICE = "google.longrunning.Operations"
# What answers a method, its request type, and its response serialiser.
_Method = tuple[Callable[[Any], Any], Any, Callable[[Any], bytes]]


class TpuService:
    def __init__(
        self,
        world: World,
        faults: FaultBook[Fault],
        calls: Counter[str],
        refresh: Callable[[], None],
        max_page_size: int = 1000,
    ) -> None:
        self.world = world
        self.faults = faults
        self.calls = calls
        # Evaluates due transitions and lets the VM fleet act on them.
        self.refresh = refresh
        self.max_page_size = max_page_size
        # Awaited before each call is answered; a test sets it to bring the clock up to the
        # time-skipping server's first.
        self.before_call: Callable[[], Awaitable[None]] | None = None

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        ct, ops = cloud_tpu, operations_pb2
        op_out = ops.Operation.SerializeToString
        empty_out = empty_pb2.Empty.SerializeToString
        tpu: dict[str, _Method] = {
            "CreateQueuedResource": (self.create_qr, ct.CreateQueuedResourceRequest, op_out),
            "GetQueuedResource": (
                self.get_qr,
                ct.GetQueuedResourceRequest,
                ct.QueuedResource.serialize,
            ),
            "ListQueuedResources": (
                self.list_qrs,
                ct.ListQueuedResourcesRequest,
                ct.ListQueuedResourcesResponse.serialize,
            ),
            "DeleteQueuedResource": (self.delete_qr, ct.DeleteQueuedResourceRequest, op_out),
            "CreateNode": (self.create_node, ct.CreateNodeRequest, op_out),
            "GetNode": (self.get_node, ct.GetNodeRequest, ct.Node.serialize),
            "ListNodes": (self.list_nodes, ct.ListNodesRequest, ct.ListNodesResponse.serialize),
            "DeleteNode": (self.delete_node, ct.DeleteNodeRequest, op_out),
        }
        # Plain protobuf messages here, where the TPU API's are proto-plus ones.
        operations: dict[str, _Method] = {
            "GetOperation": (self.get_operation, ops.GetOperationRequest, op_out),
            "ListOperations": (
                self.list_operations,
                ops.ListOperationsRequest,
                ops.ListOperationsResponse.SerializeToString,
            ),
            "DeleteOperation": (self.delete_operation, ops.DeleteOperationRequest, empty_out),
            "CancelOperation": (self.cancel_operation, ops.CancelOperationRequest, empty_out),
        }
        tpu_handlers = {
            name: self._rpc(name, fn, req.deserialize, out) for name, (fn, req, out) in tpu.items()
        }
        ops_handlers = {
            name: self._rpc(name, fn, req.FromString, out)
            for name, (fn, req, out) in operations.items()
        }
        return [
            grpc.method_handlers_generic_handler(TPU_SERVICE, tpu_handlers),
            grpc.method_handlers_generic_handler(OPERATIONS_SERVICE, ops_handlers),
        ]

    def _rpc(
        self,
        method: str,
        fn: Callable[[Any], Any],
        deserialize: Callable[[bytes], Any],
        serialize: Callable[[Any], bytes],
    ) -> grpc.RpcMethodHandler:
        async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if self.before_call is not None:
                await self.before_call()
            self.calls[method] += 1
            self.refresh()
            fault = self.faults.take(method, self._resource_ids(request))
            if fault is not None and fault.when == "before":
                await context.abort(fault.status, f"injected fault: {fault.code}")
            try:
                response = fn(request)
            except ApiError as exc:
                await context.abort(exc.code, exc.message)
            if fault is not None:
                await context.abort(fault.status, f"injected fault: {fault.code}")
            return response

        return grpc.unary_unary_rpc_method_handler(
            behaviour, request_deserializer=deserialize, response_serializer=serialize
        )

    def _resource_ids(self, request: Any) -> set[str]:
        """Ids a call is about, for faults filtered by slice."""
        ids: set[str] = set()
        for attr in ("queued_resource_id", "node_id"):
            value = getattr(request, attr, "")
            if value:
                ids.add(value)
        name = getattr(request, "name", "")
        if "/operations/" in name:
            op = self.world.ops.get(name)
            name = op.target if op is not None else name
        if name:
            ids.add(name.rsplit("/", 1)[-1])
            node = self.world.nodes.get(name)
            if node is not None and node.qr is not None:
                ids.add(node.qr.id)
        return ids

    # ------------------------------------------------------------- queued resources

    def create_qr(self, request: cloud_tpu.CreateQueuedResourceRequest) -> Any:
        op = self.world.create_qr(request)
        self.refresh()
        return op.to_pb()

    def get_qr(self, request: cloud_tpu.GetQueuedResourceRequest) -> cloud_tpu.QueuedResource:
        return self.world.qr_pb(self.world.get_qr(request.name))

    def list_qrs(self, request: cloud_tpu.ListQueuedResourcesRequest) -> Any:
        records = self.world.list_qrs(request.parent)
        page, token = self._page(records, request.page_size, request.page_token)
        return cloud_tpu.ListQueuedResourcesResponse(
            queued_resources=[self.world.qr_pb(qr) for qr in page], next_page_token=token
        )

    def delete_qr(self, request: cloud_tpu.DeleteQueuedResourceRequest) -> Any:
        op = self.world.delete_qr(request.name, request.force, request.request_id)
        self.refresh()
        return op.to_pb()

    # ------------------------------------------------------------- nodes

    def create_node(self, request: cloud_tpu.CreateNodeRequest) -> Any:
        op = self.world.create_node(request)
        self.refresh()
        return op.to_pb()

    def get_node(self, request: cloud_tpu.GetNodeRequest) -> cloud_tpu.Node:
        return self.world.node_pb(self.world.get_node(request.name))

    def list_nodes(self, request: cloud_tpu.ListNodesRequest) -> Any:
        records = self.world.list_nodes(request.parent)
        page, token = self._page(records, request.page_size, request.page_token)
        return cloud_tpu.ListNodesResponse(
            nodes=[self.world.node_pb(node) for node in page], next_page_token=token
        )

    def delete_node(self, request: cloud_tpu.DeleteNodeRequest) -> Any:
        op = self.world.delete_node(request.name)
        self.refresh()
        return op.to_pb()

    # ------------------------------------------------------------- operations

    def _op(self, name: str) -> Any:
        op = self.world.ops.get(name)
        if op is None:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"operation {name} not found")
        return op

    def get_operation(self, request: operations_pb2.GetOperationRequest) -> Any:
        return self._op(request.name).to_pb()

    def list_operations(self, request: operations_pb2.ListOperationsRequest) -> Any:
        prefix = request.name.rstrip("/") + "/"
        if not request.name.endswith("/operations"):
            prefix += "operations/"
        page, token = self._page(
            self.world.ops.under(prefix), request.page_size, request.page_token
        )
        return operations_pb2.ListOperationsResponse(
            operations=[op.to_pb() for op in page], next_page_token=token
        )

    def delete_operation(self, request: operations_pb2.DeleteOperationRequest) -> Any:
        self._op(request.name)
        self.world.ops.pop(request.name)
        return empty_pb2.Empty()

    def cancel_operation(self, request: operations_pb2.CancelOperationRequest) -> Any:
        # Recorded only: like many real operations, these cannot actually be cancelled.
        self._op(request.name).cancel_requested = True
        return empty_pb2.Empty()

    def _page(
        self, records: Sequence[Any], page_size: int, page_token: str
    ) -> tuple[list[Any], str]:
        """One page, as Google APIs serve them: the server caps the size (and picks it when
        the request does not), and the token says where the next page starts."""
        try:
            start = int(page_token) if page_token else 0
        except ValueError:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "invalid page_token") from None
        size = page_size if 0 < page_size <= self.max_page_size else self.max_page_size
        end = start + size
        return list(records[start:end]), str(end) if end < len(records) else ""
