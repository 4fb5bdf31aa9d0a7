"""Refuse request bodies over ``max_body_bytes`` with 413, before the app reads them into memory.

A declared ``Content-Length`` over the limit is refused at once; a chunked body is counted as it
streams and refused when it passes the limit.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem_response


class _TooLarge(HTTPException):
    """An HTTPException, so FastAPI's body parsing re-raises it (as it does for HTTPExceptions)
    and the problem handler answers 413."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _detail(self) -> str:
        return (
            f"request body exceeds this server's limit of {self.max_body_bytes} bytes; "
            "send a smaller body or raise MESHPLAN_MAX_BODY_BYTES on the server"
        )

    def _response(self, scope: Scope):
        return problem_response(413, self._detail(), instance=scope.get("path"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_body_bytes
            except ValueError:
                too_large = False  # the server (h11/httptools) rejects a malformed length itself
            if too_large:
                await self._response(scope)(scope, receive, send)
                return

        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _TooLarge(413, self._detail())
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._response(scope)(scope, receive, send)
