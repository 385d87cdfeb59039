"""Login sessions: who is looking, with the broker account they signed in with.

The console holds no accounts of its own: a user signs in with an access key and secret of
the brokers' HMAC auth file, and every call made for them is signed with it, so the brokers
decide what they may see and do. A session is admin when the brokers accept an admin call
from it. Secrets stay in this process; the browser holds only a random session token.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from txmq.broker import errors
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.console.history import History

COOKIE = "txmq_console"
IDLE_S = 8 * 3600  # a session unused this long is closed


@dataclass
class Session:
    access_key: str
    client: ClusterClient
    history: History
    admin: bool = False
    used: float = field(default_factory=time.monotonic)

    @property
    def who(self) -> str:
        return self.access_key or "anonymous"


class Sessions:
    def __init__(self, brokers: str, *, refresh_s: float, timeout_s: float = 5.0) -> None:
        self.brokers = brokers
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._by_token: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, access_key: str = "", secret_key: str = "") -> tuple[str, Session]:
        """Sign in (an empty key: anonymous, for brokers without auth). Raises Unauthorized when
        the brokers refuse the account."""
        creds = {"access_key": access_key, "secret_key": secret_key} if access_key else {}
        client = ClusterClient(self.brokers, timeout_s=self.timeout_s, retry_unavailable_s=min(self.timeout_s, 2.0),
                               **creds)
        try:
            routes = client.routes(refresh=True)
            first = "" if not routes.cluster else next((g for g, l in sorted(routes.leaders.items()) if l), "")
            try:
                client.group(first).stats()  # an admin call: the brokers say whether this account is admin
                admin = True
            except errors.Forbidden:
                admin = False
        except BaseException:
            client.close()
            raise
        session = Session(access_key, client, History(self.refresh_s), admin)
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._by_token[token] = session
        self._expire()
        return token, session

    def get(self, token: str | None) -> Session | None:
        with self._lock:
            session = self._by_token.get(token or "")
        if session is not None:
            session.used = time.monotonic()
        return session

    def close(self, token: str | None) -> None:
        with self._lock:
            session = self._by_token.pop(token or "", None)
        if session is not None:
            session.client.close()

    def close_all(self) -> None:
        with self._lock:
            sessions, self._by_token = list(self._by_token.values()), {}
        for s in sessions:
            s.client.close()

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            old = [t for t, s in self._by_token.items() if now - s.used > IDLE_S]
        for token in old:
            self.close(token)
