"""The HTTP JSON API and the web page, as one Starlette application.

Every ``/api/v1`` request carries HTTP Basic credentials (send them over TLS: configure
``tls:``). Bodies are JSON and at most 64 KiB. Errors are ``{"ok": false, "code", "sqlstate",
"error", "hint", "epsilon_spent"}`` with no paths and no stack traces. ``/openapi.json``
describes the API; ``/`` is the page for analysts (budget, history, explain then run) and
for the data owner (every analyst's spend, dataset totals, refusals).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import h11
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from dpsql.server.balance import AddressCounts
from dpsql.server.page import APP_JS, PAGE_HTML
from dpsql.server.service import Service, ServiceError, loggable

log = logging.getLogger("dpsql.server")
MAX_BODY = 64 * 1024
BODY_KEYS = frozenset({"sql", "epsilon", "delta", "accuracy", "weights", "params", "tune",
                       "dialect"})
EXPLAIN_KEYS = BODY_KEYS - {"tune"}  # a "tune" is refused (Service.explain)
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "frame-ancestors 'none'",
}


def _json(body, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=_SECURITY_HEADERS)


def _privacy(body: dict) -> dict:
    """A body's privacy keywords, as the embedded ``cursor.execute`` takes them (checked
    there: a weight that names no column or is not a number > 0 is the engine's refusal)."""
    return {name: body.get(name) for name in ("epsilon", "delta", "accuracy", "weights")}


def openapi() -> dict:
    """The OpenAPI 3.1 description of the API."""
    error = {"$ref": "#/components/schemas/Error"}
    fields = {
        "sql": {"type": "string", "maxLength": 16384},
        "epsilon": {"type": "number", "exclusiveMinimum": 0},
        "delta": {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                  "description": "δ of a release whose GROUP BY keys have no public values "
                  "(default 0: refused)"},
        "accuracy": {"type": "number", "exclusiveMinimum": 0,
                     "description": "without epsilon: the 95% interval half-width of COUNT "
                     "and SUM answers, which picks the smallest ε that meets it (execute's "
                     "accuracy=)"},
        "weights": {"type": "object",
                    "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
                    "description": "output column -> weight in the split of ε among the "
                    "measurements (execute's weights=)"},
        "tune": {"type": "number", "exclusiveMinimum": 0,
                 "description": "slice of epsilon spent on choosing the table's contribution "
                 "bounds first"},
        "dialect": {"type": "string", "description": "the SQL dialect of sql (duckdb, "
                    "postgres, spark, ...; default: the metadata's, else duckdb)"},
        "params": {"type": "array", "items": {}}}

    def sql_body(keys: frozenset) -> dict:
        return {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["sql"], "additionalProperties": False,
            "properties": {name: kind for name, kind in fields.items() if name in keys}}}}}

    def op(summary: str, ok: dict, *, body: dict | None = None, dataset: bool = False) -> dict:
        item = {"summary": summary, "security": [{"basic": []}],
                "responses": {"200": {"description": "OK", "content": {
                    "application/json": {"schema": ok}}},
                    "default": {"description": "refused", "content": {
                        "application/json": {"schema": error}}}}}
        if body:
            item["requestBody"] = body
        if dataset:
            item["parameters"] = [{"name": "dataset", "in": "path", "required": True,
                                   "schema": {"type": "string"}}]
        return item

    obj = {"type": "object"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "dpsql service", "version": "1",
                 "description": "Differentially private SQL over the data owner's datasets. "
                 "Each query spends ε from the analyst's share; answers carry <col>_low and "
                 "<col>_high 95% interval columns for each noisy column."},
        "components": {
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
            "schemas": {
                "Error": {"type": "object", "properties": {
                    "ok": {"const": False}, "code": {"type": "string"},
                    "sqlstate": {"type": "string"}, "error": {"type": "string"},
                    "hint": {"type": ["string", "null"]},
                    "epsilon_spent": {"type": "number"}}},
                "Answer": {"type": "object", "properties": {
                    "ok": {"const": True}, "dataset": {"type": "string"},
                    "columns": {"type": "array", "items": obj},
                    "rows": {"type": "array", "items": {"type": "array"}},
                    "epsilon_spent": {"type": "number"}, "reused": {"type": "boolean"},
                    "truncated": {"type": "boolean"}, "budget_remaining": obj,
                    "warnings": {"type": "array", "items": {"type": "string"}},
                    "notes": {"type": "array", "items": {"type": "string"}},
                    "sensitivity": {"type": "number"},
                    "tuned_bounds": {"type": ["object", "null"]}}}}},
        "paths": {
            "/api/v1/me": {"get": op("who you are and your role", obj)},
            "/api/v1/catalogue": {"get": op("tables, columns, types, domains, bounds", obj)},
            "/api/v1/budget": {"get": op("your share, spend and remainder per dataset", obj)},
            "/api/v1/history": {"get": op("your own requests with their answers", obj)},
            "/api/v1/datasets/{dataset}/query": {"post": op(
                "run one DP SELECT (spends ε)", {"$ref": "#/components/schemas/Answer"},
                body=sql_body(BODY_KEYS), dataset=True)},
            "/api/v1/datasets/{dataset}/explain": {"post": op(
                "the DP plan of one statement; spends nothing", obj,
                body=sql_body(EXPLAIN_KEYS), dataset=True)},
            "/api/v1/admin/overview": {"get": op(
                "data owner only: every analyst's spend, totals, refusals", obj)},
        },
    }


class Deadlines:
    """The HTTP port's limits on slow clients, shared by its connections: a request's headers
    must arrive within ``header`` seconds of the connection (or of the previous response),
    its body within ``body`` seconds of its headers, and an address has at most
    ``per_address`` connections waiting for headers at once in all the workers (``counts``,
    this one's index ``worker``): one more closes this worker's oldest (not the one just
    made: at most one more a worker). ``late`` is the 408
    response sent when a deadline passes."""

    def __init__(self, header: float, body: float, per_address: int, late: bytes,
                 counts: AddressCounts, worker: int) -> None:
        self.header, self.body, self.per_address, self.late = header, body, per_address, late
        self.counts, self.worker = counts, worker
        self.waiting: dict[str, dict[TimedH11Protocol, None]] = {}  # this worker's, oldest first


# what TimedH11Protocol reads of uvicorn, which documents none of it: (class, function, the
# names the function must use). uvicorn is pinned from below only, and a release renaming
# one of them would lose the deadlines, with a traceback per connection or silently
_UVICORN_INTERNALS = (
    (H11Protocol, "__init__", ("conn", "transport", "client", "cycle", "loop")),
    (H11Protocol, "handle_events", ("on_response_complete",)),
    (RequestResponseCycle, "__init__", ("response_started",)),
)
_HOOKS = ("connection_made", "data_received", "on_response_complete", "connection_lost")


def check_uvicorn() -> None:
    """Refuse (RuntimeError) to serve HTTP with a uvicorn whose H11Protocol lacks what the
    deadlines of ``TimedH11Protocol`` read or override."""
    missing = [f"H11Protocol.{hook}" for hook in _HOOKS
               if not callable(getattr(H11Protocol, hook, None))]
    for cls, function, names in _UVICORN_INTERNALS:
        code = getattr(getattr(cls, function, None), "__code__", None)
        missing += [f"{cls.__name__}.{function}: {name}" for name in names
                    if code is None or name not in code.co_names]
    missing += [f"h11.{state}" for state in ("IDLE", "SEND_BODY") if not hasattr(h11, state)]
    if missing:
        raise RuntimeError(
            f"uvicorn {uvicorn.__version__} (h11 {h11.__version__}) lacks what the HTTP "
            f"port's deadlines on slow clients read: {', '.join(missing)}; install a uvicorn "
            "dpsql was tested with (pip install 'uvicorn>=0.30,<0.55') or turn the HTTP port "
            "off (listen.http_port: null)")


class TimedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 connection with ``Deadlines``: uvicorn times out only idle
    keep-alive connections, so a client sending its headers or its body a byte at a time held
    its connection for ever, and 1,000 of them made the port answer 503 to everyone."""

    def __init__(self, *args, deadlines: Deadlines, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.deadlines = deadlines
        self._phase: str | None = None  # "headers", "body" or None (nothing awaited)
        self._timer: asyncio.TimerHandle | None = None
        self._begun = False  # bytes of the awaited request have arrived
        self._slot: int | None = None  # its address's in Deadlines.counts

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._follow(restart=True)

    def data_received(self, data: bytes) -> None:
        self._begun = True
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow(restart=True)  # the next request's headers are due from now

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(None)
        super().connection_lost(exc)

    def _follow(self, restart: bool = False) -> None:
        """Arm the deadline of what the client owes now; a phase's deadline is not moved by
        the bytes that arrive within it."""
        state = self.conn.their_state
        phase = None if self.transport.is_closing() else \
            "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase != self._phase or restart:
            self._enter(phase)

    def _enter(self, phase: str | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        address = self.client[0] if self.client else ""
        deadlines = self.deadlines
        waiting = deadlines.waiting.get(address, {})
        if self in waiting:
            del waiting[self]
            deadlines.counts.add(deadlines.worker, self._slot, -1)
        self._phase = phase
        if phase == "headers":
            self._begun = False
            waiting[self] = None
            deadlines.waiting[address] = waiting
            if self._slot is None:
                self._slot = deadlines.counts.slot(address)
            deadlines.counts.add(deadlines.worker, self._slot, 1)
            # counted over the workers (each had its own cap: N workers held N times it); a
            # worker closes its own oldest, never the connection just made: where the others
            # waited on another worker, it closed a full request from that address unanswered
            # (an address then holds at most its cap plus one a worker)
            oldest = next(iter(waiting))
            if deadlines.counts.total(self._slot) > deadlines.per_address and oldest is not self:
                oldest._expire()
        elif not waiting:
            self.deadlines.waiting.pop(address, None)
        if phase is not None:
            self._timer = self.loop.call_later(
                self.deadlines.header if phase == "headers" else self.deadlines.body,
                self._expire)

    def _expire(self) -> None:
        """Close the connection, with a 408 while a request is under way and unanswered (a
        401 is sent before the body is read); an idle one closes without (a client would
        read the 408 as the answer to the next request it sends on it)."""
        answered = self.cycle is not None and self.cycle.response_started
        late = self._begun if self._phase == "headers" else not answered
        self._enter(None)
        if not self.transport.is_closing():
            if late:
                self.transport.write(self.deadlines.late)
            self.transport.close()


class HttpApi:
    """The Starlette app over a service; ``protocol`` is the connection class for uvicorn."""

    def __init__(self, service: Service, executor,
                 waiting: tuple[AddressCounts, int] | None = None) -> None:
        """``waiting``: the workers' shared counts of connections awaiting their headers and
        this worker's index (default: a worker of its own)."""
        self.service, self.executor = service, executor
        # passwords are hashed on threads of their own: logins waited behind the engine's
        # threads while one analyst's slow queries held them all
        self.hashing = ThreadPoolExecutor(2, thread_name_prefix="dpsql-login")
        config = service.config
        self._verified: dict[tuple[str, str], float] = {}
        routes = [
            Route("/", self.page),
            Route("/app.js", self.script),
            Route("/openapi.json", self.spec),
            Route("/api/v1/me", self.me),
            Route("/api/v1/catalogue", self.catalogue),
            Route("/api/v1/catalogue/{dataset}", self.catalogue),
            Route("/api/v1/budget", self.budget),
            Route("/api/v1/history", self.history),
            Route("/api/v1/datasets/{dataset}/query", self.query, methods=["POST"]),
            Route("/api/v1/datasets/{dataset}/explain", self.explain, methods=["POST"]),
            Route("/api/v1/admin/overview", self.overview),
        ]
        self.app = Starlette(routes=routes, exception_handlers={
            Exception: self._crash, 404: self._not_found, 405: self._wrong_method})
        late = json.dumps(service.failure(ServiceError(
            "request_timeout", "the request's headers or body did not arrive in time",
            hint="send the whole request at once")).to_json()).encode()
        self.protocol = functools.partial(TimedH11Protocol, deadlines=Deadlines(
            config.http_header_timeout, config.http_body_timeout,
            config.http_waiting_per_address,
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(late), late),
            *(waiting or (AddressCounts(1), 0))))

    # --- plumbing ------------------------------------------------------------------------
    async def _crash(self, request: Request, exc: Exception) -> JSONResponse:
        failure = self.service.failure(exc)
        return _json(failure.to_json(), failure.status)

    async def _not_found(self, request: Request, exc: Exception) -> JSONResponse:
        return _json({"ok": False, "code": "not_found", "error": "no such endpoint",
                      "hint": "see /openapi.json", "sqlstate": "42000", "epsilon_spent": 0},
                     404)

    async def _wrong_method(self, request: Request, exc: Exception) -> JSONResponse:
        allow = getattr(exc, "headers", None) or {}
        return JSONResponse({"ok": False, "code": "wrong_method",
                             "error": f"{request.method} is not allowed here",
                             "hint": f"use {allow.get('Allow', 'GET')}", "sqlstate": "42000",
                             "epsilon_spent": 0}, status_code=405,
                            headers={**_SECURITY_HEADERS, **allow})

    def _refuse(self, err: Exception, web: bool = False) -> JSONResponse:
        failure = self.service.failure(err)
        response = _json(failure.to_json(), failure.status)
        if failure.status == 401 and not web:
            response.headers["WWW-Authenticate"] = 'Basic realm="dpsql"'
        return response

    async def _user(self, request: Request) -> str:
        """The authenticated user, or ServiceError."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            user, password = "", ""
        if scheme.lower() != "basic" or not user:
            raise ServiceError("auth_failed", "authentication required (HTTP Basic)")
        address = request.client.host if request.client else "?"
        key = (user, hashlib.sha256(password.encode()).hexdigest())
        now = time.monotonic()
        # the cache saves the hash, not the limiter: checked first, it answered the right
        # password (200) among guesses that got 429, for 5 minutes after a login
        cached = self._verified.get(key, 0) > now
        known = self.service.role(user) is not None
        login = await self.service.limiter.attempt(user, address, known=known)
        if login is None:
            raise ServiceError("auth_locked", f"too many failed logins for {user!r}; try later")
        ok = False
        try:
            ok = cached or await asyncio.get_running_loop().run_in_executor(
                self.hashing, self.service.check_login, user, password)
        finally:
            await self.service.limiter.finish(login, ok=ok)
        if not ok:
            # the audit's write waits for other workers' (SQLite): off the event loop
            await asyncio.to_thread(self.service.login_event, user[:100], "http", "failed",
                                    address)
            await asyncio.sleep(self.service.limiter.delay)
            raise ServiceError("auth_failed", "wrong user name or password")
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[key] = now + 300
        return user

    async def _body(self, request: Request) -> dict:
        # a cross-site HTML form can POST text/plain (or urlencoded) with the Basic
        # credentials the browser cached, but not application/json without a CORS preflight
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            raise ServiceError("media_type", "request bodies must be JSON "
                               "(Content-Type: application/json)",
                               hint="send the header Content-Type: application/json")
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
            raise ServiceError("too_large", f"request bodies are limited to {MAX_BODY} bytes")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY:
                    raise ServiceError("too_large", f"request bodies are limited to "
                                       f"{MAX_BODY} bytes")
                chunks.append(chunk)
        except ClientDisconnect:  # gone, or closed past http_body_timeout: nobody reads this
            raise ServiceError("request_timeout", "the connection closed before the body "
                               "ended") from None
        try:
            body = json.loads(b"".join(chunks) or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise ServiceError("protocol", "the body is not JSON") from None
        except RecursionError:  # past Python's stack: a 500 before
            raise ServiceError("protocol", "the body's JSON nests too deeply") from None
        if not isinstance(body, dict) or not isinstance(body.get("sql"), str):
            raise ServiceError("protocol", 'the body must be {"sql": "...", "epsilon": ...}')
        unknown = sorted(set(body) - BODY_KEYS)
        if unknown:  # ignored, a misspelt key would change nothing it asks for
            raise ServiceError(
                "protocol", f"unknown key(s) {unknown} in the body",
                hint=f"the body takes {', '.join(sorted(BODY_KEYS))}")
        for name in ("epsilon", "delta", "accuracy", "tune"):
            # an explicit null is refused, not read as "the default": the page sent NaN as
            # null, and the default ε was spent
            value = body.get(name)
            if name in body and (isinstance(value, bool) or
                                 not isinstance(value, (int, float))):
                raise ServiceError("bad_privacy_parameter", f"{name} must be a number",
                                   hint=f"leave {name} out for your default")
        # a null is refused as a number's is, not read as equal weights; other values are
        # checked by the engine (_privacy)
        if "weights" in body and body["weights"] is None:
            raise ServiceError("bad_privacy_parameter", "weights must map output column "
                               "names to numbers", hint='leave weights out for equal weights, '
                               'or send e.g. {"total": 2, "n": 1}')
        if "dialect" in body and not isinstance(body["dialect"], str):
            raise ServiceError("protocol", "dialect must be a string such as \"postgres\"",
                               hint="leave dialect out for the dataset's default")
        params = body.get("params")
        if params is not None and not (isinstance(params, list) and all(
                isinstance(p, (str, int, float, bool)) or p is None for p in params)):
            raise ServiceError("protocol", "params must be a list of scalars")
        for text in (body["sql"], *(p for p in params or () if isinstance(p, str))):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800"
                raise ServiceError("bad_encoding", "the body holds a string that is not "
                                   "valid Unicode (a lone surrogate)",
                                   hint="send UTF-8 text") from None
        return body

    async def _call(self, request: Request, work, *, body: bool = False) -> JSONResponse:
        web = request.headers.get("x-dpsql-client") == "web"
        user = "-"
        try:
            if request.headers.get("sec-fetch-site") == "cross-site":
                # another site's page, riding on credentials the browser cached
                raise ServiceError("cross_site", "requests from other sites are refused",
                                   hint="call the API from a program or from this server's "
                                   "page")
            user = await self._user(request)
            payload = await self._body(request) if body else None
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.executor, work, user, payload)
        except Exception as err:  # noqa: BLE001 - every refusal has one JSON shape
            response = self._refuse(err, web)
            log.info("http user=%s path=%s status=%d", loggable(user),
                     loggable(request.url.path, 200), response.status_code)
            return response
        log.info("http user=%s path=%s status=200", user, loggable(request.url.path, 200))
        return _json(result)

    # --- endpoints -----------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        return Response(PAGE_HTML, media_type="text/html; charset=utf-8",
                        headers=_SECURITY_HEADERS)

    async def script(self, request: Request) -> Response:
        return Response(APP_JS, media_type="text/javascript; charset=utf-8",
                        headers=_SECURITY_HEADERS)

    async def spec(self, request: Request) -> JSONResponse:
        return _json(openapi())

    async def me(self, request: Request) -> JSONResponse:
        def work(user, _):
            role = self.service.role(user)
            out = {"user": user, "role": role}
            if role == "analyst":
                out["datasets"] = sorted(self.service.config.analysts[user].budgets)
            return out
        return await self._call(request, work)

    async def catalogue(self, request: Request) -> JSONResponse:
        dataset = request.path_params.get("dataset")
        return await self._call(request, lambda user, _: self.service.catalogue(user, dataset))

    async def budget(self, request: Request) -> JSONResponse:
        return await self._call(request, lambda user, _: self.service.budget(user))

    async def history(self, request: Request) -> JSONResponse:
        return await self._call(request, lambda user, _: self.service.history(user))

    async def overview(self, request: Request) -> JSONResponse:
        return await self._call(request, lambda user, _: self.service.overview(user))

    async def query(self, request: Request) -> JSONResponse:
        dataset = request.path_params["dataset"]
        return await self._call(request, lambda user, body: self.service.query(
            user, dataset, body["sql"], body.get("params"), tune=body.get("tune"),
            tune_said=f'"tune": {body.get("tune")!r}', dialect=body.get("dialect"),
            interface="http", **_privacy(body)).to_json(),
            body=True)

    async def explain(self, request: Request) -> JSONResponse:
        dataset = request.path_params["dataset"]
        return await self._call(request, lambda user, body: self.service.explain(
            user, dataset, body["sql"], body.get("params"), dialect=body.get("dialect"),
            tune=body.get("tune"), interface="http", **_privacy(body)), body=True)
