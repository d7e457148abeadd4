"""A gRPC server interceptor that answers an undecodable request with INVALID_ARGUMENT.

Without it, grpcio reports a request whose bytes are not the method's protobuf message
as `UNKNOWN` ("Unexpected error"), which tells a client nothing about its own mistake.
The interceptor wraps each method handler once (cached per method): the deserializer
keeps a decode failure as a value, and the behaviour aborts with `INVALID_ARGUMENT`
naming the method and the protobuf error. Only methods with a single request message are
wrapped; streaming requests pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

if TYPE_CHECKING:
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler


class _Undecodable:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # protobuf raises DecodeError (and others on odd input)
            return _Undecodable(exc)

    return deserialize


def _guard_unary(method: str, behavior: Callable[..., Any], streaming_response: bool) -> Any:
    message = f"cannot decode the request of {method}"

    if streaming_response:

        async def stream_behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{message}: {request.error}")
            async for response in behavior(request, context):
                yield response

        return stream_behavior

    async def unary_behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, _Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{message}: {request.error}")
        return await behavior(request, context)

    return unary_behavior


def guard_handler(method: str, handler: Handler) -> Handler:
    """`handler` with decode failures of its request answered as INVALID_ARGUMENT."""
    if handler.request_streaming or handler.request_deserializer is None:
        return handler
    deserializer = _tolerant(handler.request_deserializer)
    if handler.response_streaming:
        assert handler.unary_stream is not None
        return grpc.unary_stream_rpc_method_handler(
            _guard_unary(method, handler.unary_stream, True),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    assert handler.unary_unary is not None
    return grpc.unary_unary_rpc_method_handler(
        _guard_unary(method, handler.unary_unary, False),
        request_deserializer=deserializer,
        response_serializer=handler.response_serializer,
    )


class WrappingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each method's handler once with `_wrap` and serves the wrapped one after."""

    def __init__(self) -> None:
        self._guarded: dict[str, Handler] = {}

    def _wrap(self, method: str, handler: Handler) -> Handler:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        cached = self._guarded.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        guarded = self._wrap(method, handler)
        self._guarded[method] = guarded
        return guarded


class DecodeGuard(WrappingInterceptor):
    """Wraps every single-request method of the server with `guard_handler` (cached)."""

    def _wrap(self, method: str, handler: Handler) -> Handler:
        return guard_handler(method, handler)
