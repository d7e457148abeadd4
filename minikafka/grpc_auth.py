"""A gRPC server interceptor that names the caller of every request and may refuse it.

The principal comes from the peer's TLS certificate subject (gRPC's `x509_subject`, an RFC
2253 DN) through the mapping rules (`minikafka.principal`); a peer without a certificate is
`User:ANONYMOUS`. A subject no rule maps is refused with `UNAUTHENTICATED` before the
servicer runs. `authorize(principal, method, request)`, when given, is then asked about the
call; a refusal it returns (`StatusCode`, message) aborts the call with it.

Installed only on servers that run with TLS: a plaintext server keeps its interceptors
exactly as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from minikafka.grpc_guard import WrappingInterceptor
from minikafka.principal import Rule, principal_of

if TYPE_CHECKING:
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
#: (principal, full method name, request or None for a streaming request) -> a refusal.
Authorize: TypeAlias = Callable[[str, str, Any], "tuple[grpc.StatusCode, str] | None"]


def peer_subject(context: Context) -> str | None:
    """The RFC 2253 subject of the peer's certificate, None without one."""
    values = list(context.auth_context().get("x509_subject", ()))
    if not values:
        return None
    subject: bytes = values[0]
    return subject.decode("utf-8", errors="replace")


class AuthGuard(WrappingInterceptor):
    """Wraps every handler of the server (cached per method) with the principal check
    and `authorize`."""

    def __init__(self, rules: tuple[Rule, ...], authorize: Authorize | None = None) -> None:
        super().__init__()
        self._rules = rules
        self._authorize = authorize

    async def _refuse(self, method: str, request: Any, context: Context) -> None:
        subject = peer_subject(context)
        principal = principal_of(subject, self._rules)
        if principal is None:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"the certificate subject {subject!r} is not mapped to a principal by "
                "ssl.principal.mapping.rules",
            )
        if self._authorize is not None:
            assert principal is not None
            refusal = self._authorize(principal, method, request)
            if refusal is not None:
                await context.abort(*refusal)

    def _wrap(self, method: str, handler: Handler) -> Handler:
        refuse = self._refuse
        if handler.unary_unary is not None:
            inner_uu: Any = handler.unary_unary  # an async behaviour on an aio server

            async def unary_unary(request: Any, context: Context) -> Any:
                await refuse(method, request, context)
                return await inner_uu(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            inner_us: Any = handler.unary_stream  # an async behaviour on an aio server

            async def unary_stream(request: Any, context: Context) -> AsyncIterator[Any]:
                await refuse(method, request, context)
                async for response in inner_us(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            inner_su: Any = handler.stream_unary  # an async behaviour on an aio server

            async def stream_unary(requests: Any, context: Context) -> Any:
                await refuse(method, None, context)
                return await inner_su(requests, context)

            return grpc.stream_unary_rpc_method_handler(
                stream_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        assert handler.stream_stream is not None
        inner_ss: Any = handler.stream_stream  # an async behaviour on an aio server

        async def stream_stream(requests: Any, context: Context) -> AsyncIterator[Any]:
            await refuse(method, None, context)
            async for response in inner_ss(requests, context):
                yield response

        return grpc.stream_stream_rpc_method_handler(
            stream_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
