"""The console's web app: Starlette routes rendering Jinja2 templates, refreshed by htmx.

A page is rendered whole on first load; htmx then asks for the same URL every refresh
interval with the `HX-Request` header and swaps in just its live part (the template's
`live` block, rendered from `_<page>.html`). Charts fetch JSON from /api/chart/<name>.
Endpoints are plain functions: Starlette runs them in its thread pool, where the blocking
gRPC client belongs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from txmq.broker import __version__, errors
from txmq.broker.console import views
from txmq.broker.console.sessions import COOKIE, Session, Sessions

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
PAGES = (("cluster", "Cluster"), ("transactions", "Transactions"), ("topics", "Topics"), ("timers", "Timers"),
         ("groups", "Consumer groups"), ("messages", "Messages"), ("spark", "Spark"))


TOPICS_PER_PAGE = 100  # a page of 1,000 topics' queues would be a DOM too big to refresh every interval


def _ms(ms: float) -> str:
    s = ms / 1000
    return f"{s:.1f} s" if s < 120 else (f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h")


def _when(value: str) -> int | None:
    """A form's time: epoch milliseconds, or a datetime-local value in the console host's time zone."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise errors.BadRequest(f"{value!r} is not a time (YYYY-MM-DDTHH:MM[:SS] or epoch milliseconds)") from None


def create_app(brokers: str, *, refresh_s: float = 2.0, timeout_s: float = 5.0) -> Starlette:
    sessions = Sessions(brokers, refresh_s=refresh_s, timeout_s=timeout_s)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["group_label"] = views.group_label
    templates.env.globals.update(pages=PAGES, refresh_s=refresh_s, version=__version__, brokers=brokers,
                                 group_label=views.group_label, age=_ms,
                                 clock=lambda t: time.strftime("%H:%M:%S", time.localtime(t)),
                                 stamp=lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)))

    def session_of(request: Request) -> Session | None:
        session = sessions.get(request.cookies.get(COOKIE))
        if session is None and not request.cookies.get(COOKIE + "_signed_out"):
            try:  # brokers without auth: everyone is the anonymous admin, no sign-in page
                token, session = sessions.open()
            except errors.Unauthorized:
                return None
            request.state.new_token = token
        return session

    def with_cookie(request: Request, response: Response) -> Response:
        token = getattr(request.state, "new_token", None)
        if token:
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    def render(request: Request, session: Session, page: str, **context: Any) -> Response:
        """The whole page, or its live part for an htmx refresh."""
        name = f"_{page}.html" if request.headers.get("HX-Request") else f"{page}.html"
        context.update(session=session, page=page, now=time.time())
        return with_cookie(request, templates.TemplateResponse(request, name, context))

    def page(name: str, build: Callable[[Request, Session], dict], *, admin: bool = False) -> Callable:
        def endpoint(request: Request) -> Response:
            session = session_of(request)
            if session is None:
                return RedirectResponse("/login", status_code=303)
            started, read_started = time.perf_counter(), time.time()  # (wall clock: a test waits for a read begun after an event)
            try:
                if admin and not session.admin:
                    raise errors.Forbidden(f"{session.who} is not an admin account: this page needs one")
                context = build(request, session)
            except errors.TxmqError as exc:
                status = 403 if isinstance(exc, (errors.Forbidden, errors.Unauthorized)) else (
                    404 if isinstance(exc, errors.NotFound) else 400 if isinstance(exc, errors.BadRequest) else 503)
                response = render(request, session, "error", error=exc, kind=type(exc).__name__)
                response.status_code = status
                return response
            context["elapsed_ms"] = (time.perf_counter() - started) * 1000
            context["read_started"] = read_started
            return render(request, session, name, **context)
        return endpoint

    def sample(session: Session, topics: list[views.TopicRow] | None = None) -> None:
        """Feed the session's charts (at most once per refresh interval); topic rates only from
        the Topics page, which reads the topics anyway."""
        if not session.admin or not session.history.due():
            return
        ends = {t.name: t.end for t in topics} if topics is not None else None
        session.history.sample(views.stats_by_group(session.client), ends)

    # ---- pages -------------------------------------------------------------------------
    def cluster(request: Request, session: Session) -> dict:
        return {"view": views.cluster_view(session.client)}

    def transactions(request: Request, session: Session) -> dict:
        sample(session)
        return {"view": views.transactions_view(session.client)}

    def topics(request: Request, session: Session) -> dict:
        q = request.query_params
        rows = views.topics_view(session.client, include_system=q.get("system") == "1")
        sample(session, rows)
        wanted = q.get("q", "").strip()
        matching = [t for t in rows if wanted in t.name] if wanted else rows
        page_no = max(0, int(q.get("page", "0") or 0)) if q.get("page", "0").isdigit() else 0
        shown = matching[page_no * TOPICS_PER_PAGE:(page_no + 1) * TOPICS_PER_PAGE]
        return {"topics": shown, "total": len(rows), "matching": len(matching), "page_no": page_no,
                "page_count": max(1, -(-len(matching) // TOPICS_PER_PAGE)), "wanted": wanted,
                "system": q.get("system") == "1"}

    def timers(request: Request, session: Session) -> dict:
        view = views.timers_view(session.client)
        return {"view": view, "done": request.query_params.get("done")}

    def groups(request: Request, session: Session) -> dict:
        return {"groups": views.consumer_groups_view(session.client)}

    def group(request: Request, session: Session) -> dict:
        name = request.path_params["name"]
        return {"group": views.consumer_group_view(session.client, name),
                "topics": [t.name for t in views.topics_view(session.client)], "done": request.query_params.get("done")}

    def messages(request: Request, session: Session) -> dict:
        q = request.query_params
        found = None
        begin_ms, end_ms = _when(q.get("from", "")), _when(q.get("to", ""))
        if q.get("id") or (q.get("topic") and (q.get("key") or begin_ms)):
            found = views.find_messages(session.client, message_id=q.get("id", "").strip(),
                                        topic=q.get("topic", "").strip(), key=q.get("key", "").strip(),
                                        begin_ms=begin_ms or 0, end_ms=end_ms)
        return {"found": found, "q": q, "done": q.get("done")}

    def spark(request: Request, session: Session) -> dict:
        checkpoint = request.query_params.get("checkpoint", "").strip()
        return {"checkpoint": checkpoint, "view": views.spark_view(session.client, checkpoint) if checkpoint else None}

    # ---- actions (admin) ---------------------------------------------------------------
    def action(do: Callable[[Request, Session, dict], str]) -> Callable:
        async def endpoint(request: Request) -> Response:
            form = dict(await request.form())

            def run() -> Response:
                session = session_of(request)
                if session is None:
                    return RedirectResponse("/login", status_code=303)
                try:
                    if not session.admin:
                        raise errors.Forbidden(f"{session.who} is not an admin account: only admins may do this")
                    return RedirectResponse(do(request, session, form), status_code=303)
                except errors.TxmqError as exc:
                    response = render(request, session, "error", error=exc, kind=type(exc).__name__)
                    response.status_code = 403 if isinstance(exc, errors.Forbidden) else 400
                    return response
            return await run_in_threadpool(run)
        return endpoint

    def reset(request: Request, session: Session, form: dict) -> str:
        name = request.path_params["name"]
        to = form.get("to", "latest")
        if to not in ("earliest", "latest", "time"):
            raise errors.BadRequest(f"reset to earliest, latest or a time, not {to!r}")
        views.reset_offsets(session.client, name, form["topic"], to, _when(str(form.get("at", ""))))
        return f"/groups/{name}?done=reset+{form['topic']}+to+{to}"

    def end_tx(request: Request, session: Session, form: dict) -> str:
        verb, tx_id, group = request.path_params["verb"], form["transaction_id"], form.get("group", "")
        client = session.client.group(group)
        if verb == "resume":
            client.resume_transaction(tx_id)
        elif verb in ("commit", "rollback"):
            client.end_transaction(tx_id, verb.upper(), source="admin")
        else:
            raise errors.BadRequest(f"unknown transaction action {verb!r}")
        return "/transactions"

    def recall(request: Request, session: Session, form: dict) -> str:
        message_id = views.recall(session.client, form.get("group", ""), form["topic"], form["recall_handle"])
        return f"/timers?done=recalled+{message_id}"

    def resend(request: Request, session: Session, form: dict) -> str:
        new_id = views.resend(session.client, form.get("group", ""), form["message_id"], form["topic"])
        return f"/messages?id={new_id}&done=resent+as+{new_id}"

    # ---- sign-in and charts ------------------------------------------------------------
    async def login(request: Request) -> Response:
        error = None
        if request.method == "POST":
            form = await request.form()
            try:
                token, _ = await run_in_threadpool(sessions.open, str(form.get("access_key", "")).strip(),
                                                   str(form.get("secret_key", "")))
            except (errors.Unauthorized, errors.Forbidden) as exc:
                error = f"the brokers refused this account: {exc}"
            except errors.TxmqError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                response = RedirectResponse("/cluster", status_code=303)
                response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
                response.delete_cookie(COOKIE + "_signed_out")
                return response
        response = templates.TemplateResponse(request, "login.html", {"error": error, "page": "login",
                                                                      "session": None})
        if error:
            response.status_code = 401
        return response

    def logout(request: Request) -> Response:
        sessions.close(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        response.set_cookie(COOKIE + "_signed_out", "1", httponly=True, samesite="strict")
        return response

    def chart(request: Request) -> Response:
        session = sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return JSONResponse({"error": "not signed in"}, status_code=401)
        name = request.path_params["name"]
        if name == "transactions":
            return JSONResponse(session.history.transaction_chart())
        if name == "topics":
            return JSONResponse(session.history.topic_chart())
        if name == "elections":
            try:
                return JSONResponse(views.cluster_view(session.client).epoch_chart())
            except errors.TxmqError as exc:
                return JSONResponse({"error": str(exc)}, status_code=403 if isinstance(exc, errors.Forbidden) else 503)
        if name == "timers":  # a histogram: messages due per bucket, x in seconds as the other charts
            try:
                view = views.timers_view(session.client, rows=0)
            except errors.TxmqError as exc:
                return JSONResponse({"error": str(exc)}, status_code=403 if isinstance(exc, errors.Forbidden) else 503)
            return JSONResponse({"x": [start / 1000 for start, _ in view.buckets], "bars": True,
                                 "unit": "messages due", "bucket_s": view.bucket_ms / 1000,
                                 "series": [{"label": "messages due", "values": [n for _, n in view.buckets]}]})
        return JSONResponse({"error": f"no chart {name!r}"}, status_code=404)

    routes = [
        Route("/", lambda request: RedirectResponse("/cluster", status_code=303)),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/cluster", page("cluster", cluster)),
        Route("/transactions", page("transactions", transactions, admin=True)),
        Route("/transactions/{verb}", action(end_tx), methods=["POST"]),
        Route("/topics", page("topics", topics)),
        Route("/timers", page("timers", timers, admin=True)),
        Route("/timers/recall", action(recall), methods=["POST"]),
        Route("/groups", page("groups", groups)),
        Route("/groups/{name}", page("group", group)),
        Route("/groups/{name}/reset", action(reset), methods=["POST"]),
        Route("/messages", page("messages", messages)),
        Route("/messages/resend", action(resend), methods=["POST"]),
        Route("/spark", page("spark", spark)),
        Route("/api/chart/{name}", chart),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        sessions.close_all()

    return Starlette(routes=routes, lifespan=lifespan)


def serve(brokers: str, listen: str, *, refresh_s: float = 2.0, timeout_s: float = 5.0) -> None:
    """Run the console in the foreground (what `txmq console` does)."""
    import uvicorn

    host, _, port = listen.rpartition(":")
    app = create_app(brokers, refresh_s=refresh_s, timeout_s=timeout_s)
    config = uvicorn.Config(app, host=host.strip("[]") or "127.0.0.1", port=int(port), log_level="warning")
    server = uvicorn.Server(config)
    # uvicorn prints nothing at "warning": say where the console is, as the broker says where it listens
    original = server.startup

    async def startup(sockets=None) -> None:
        await original(sockets)
        for s in server.servers:
            for sock in s.sockets:
                h, p = sock.getsockname()[:2]
                print(f"txmq console on http://{h}:{p}/ (brokers {brokers})", flush=True)

    server.startup = startup
    server.run()
