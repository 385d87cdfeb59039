"""Authentication (HMAC-SHA1 request signatures) and per-topic authorisation.

Off by default. With `--auth-file`, every call must carry RocketMQ 5's
signature header:

    authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is HMAC-SHA1(secret, value of x-mq-date-time). Dates more
than 15 minutes away from the broker's clock are refused (a captured header
cannot be replayed for long). With auth off, the empty credential the official
clients send is accepted.

The auth file (TOML or JSON) lists accounts:

    [[accounts]]
    access_key = "orders-app"
    secret_key = "s3cret"
    producer_groups = ["orders"]     # the first is the group of its RocketMQ-protocol transactions
    publish = ["orders", "audit-*"]  # topic names or prefixes ending in '*'; "*" = all
    subscribe = ["orders"]
    admin = false                    # native admin calls (create/delete topics, resume transactions)

Producer groups isolate transactions: a caller can end or answer check-backs
only for transactions prepared under one of its groups.
"""

from __future__ import annotations

import calendar
import hmac
import json
import re
import threading
import time
import tomllib
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path
from typing import Iterable, Sequence

import grpc

from txmq.broker.errors import Forbidden, Unauthorized
from txmq.broker.protocol.refusing import refusing_handler

MAX_CLOCK_SKEW_S = 15 * 60
_AUTH_RE = re.compile(
    r"^\s*MQv2-HMAC-SHA1\s+Credential=(?P<ak>[^,]*),\s*SignedHeaders=(?P<headers>[^,]*),\s*Signature=(?P<sig>[0-9a-fA-F]*)\s*$")


@dataclass(frozen=True)
class Identity:
    """Who is calling, and what they may do. `ANONYMOUS` when auth is off."""

    access_key: str = ""
    producer_groups: tuple[str, ...] = ()
    publish: tuple[str, ...] = ("*",)
    subscribe: tuple[str, ...] = ("*",)
    admin: bool = True
    authenticated: bool = False

    @property
    def producer_group(self) -> str:
        """The group RocketMQ-protocol transactions of this caller are prepared under."""
        return self.producer_groups[0] if self.producer_groups else ""

    def may_publish(self, topic: str) -> bool:
        return _matches(topic, self.publish)

    def may_subscribe(self, topic: str) -> bool:
        return _matches(topic, self.subscribe)

    def owns_producer_group(self, group: str) -> bool:
        """Auth off: everyone owns every group. Auth on: only the account's groups."""
        return not self.authenticated or group in self.producer_groups

    def require_publish(self, topic: str) -> None:
        if not self.may_publish(topic):
            raise Forbidden(f"access key {self.access_key!r} may not publish to topic {topic!r}")

    def require_subscribe(self, topic: str) -> None:
        if not self.may_subscribe(topic):
            raise Forbidden(f"access key {self.access_key!r} may not subscribe to topic {topic!r}")

    def require_producer_group(self, group: str, what: str = "transaction") -> None:
        if not self.owns_producer_group(group):
            raise Forbidden(f"access key {self.access_key!r} may not act on a {what} of producer group {group!r}")

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden(f"access key {self.access_key!r} is not an admin")


ANONYMOUS = Identity()


def _matches(topic: str, patterns: Iterable[str]) -> bool:
    for p in patterns:
        if p == "*" or p == topic or (p.endswith("*") and topic.startswith(p[:-1])):
            return True
    return False


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    identity: Identity


def sign(secret_key: str, date_time: str) -> str:
    """The hex HMAC-SHA1 signature RocketMQ 5 clients put in the authorization header."""
    return hmac.new(secret_key.encode(), date_time.encode(), sha1).hexdigest()


def authorization_header(access_key: str, secret_key: str, date_time: str) -> str:
    return (f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
            f"Signature={sign(secret_key, date_time)}")


def format_date_time(epoch_s: float | None = None) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if epoch_s is None else epoch_s))


def parse_date_time(text: str) -> float:
    """Epoch seconds of a `YYYYMMDDTHHMMSSZ` date (read as UTC)."""
    try:
        return float(calendar.timegm(time.strptime(text, "%Y%m%dT%H%M%SZ")))
    except (ValueError, OverflowError) as exc:
        raise Unauthorized(f"x-mq-date-time {text!r} is not a YYYYMMDDTHHMMSSZ date") from exc


class Authenticator:
    """Checks request metadata against the accounts of an auth file (or accepts all when disabled)."""

    def __init__(self, accounts: Sequence[Account] = (), *, enabled: bool = False, clock=time.time) -> None:
        self.enabled = enabled
        self._accounts = {a.access_key: a for a in accounts}
        self._clock = clock
        # The same header is sent by a client for every call within one second:
        # remember recent verdicts so the HMAC runs once per (header, date).
        self._recent: dict[tuple[str, str], Identity] = {}
        self._lock = threading.Lock()

    @classmethod
    def disabled(cls) -> "Authenticator":
        return cls(enabled=False)

    @classmethod
    def from_file(cls, path: Path) -> "Authenticator":
        """Load accounts from a TOML or JSON auth file; ValueError names what is wrong."""
        raw = Path(path).read_bytes()
        try:
            data = json.loads(raw) if Path(path).suffix.lower() == ".json" else tomllib.loads(raw.decode())
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"cannot parse auth file {path}: {exc}") from exc
        accounts = []
        for i, entry in enumerate(data.get("accounts", [])):
            ak, sk = entry.get("access_key"), entry.get("secret_key")
            if not ak or not sk:
                raise ValueError(f"auth file {path}: account #{i} needs access_key and secret_key")
            identity = Identity(
                access_key=ak,
                producer_groups=tuple(entry.get("producer_groups", [])),
                publish=tuple(entry.get("publish", entry.get("pub", []))),
                subscribe=tuple(entry.get("subscribe", entry.get("sub", []))),
                admin=bool(entry.get("admin", False)),
                authenticated=True,
            )
            accounts.append(Account(ak, sk, identity))
        if not accounts:
            raise ValueError(f"auth file {path} defines no accounts")
        return cls(accounts, enabled=True)

    def replica_account(self) -> Account | None:
        """The account a group's replicas sign their replication calls with: the first admin
        account of the auth file every replica shares (None when auth is off)."""
        if not self.enabled:
            return None
        return next((a for a in self._accounts.values() if a.identity.admin), None)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Identity:
        """The caller's identity from gRPC metadata; raises Unauthorized when auth is on and it fails."""
        if not self.enabled:
            return ANONYMOUS
        header = date = ""
        for key, value in metadata or ():
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode(errors="replace")
            elif key == "x-mq-date-time":
                date = value if isinstance(value, str) else value.decode(errors="replace")
        if not header:
            raise Unauthorized("authentication required: no authorization header")
        cached = self._recent.get((header, date))
        if cached is not None:
            self._check_fresh(date)
            return cached
        m = _AUTH_RE.match(header)
        if not m:
            raise Unauthorized("authorization header is not 'MQv2-HMAC-SHA1 Credential=..., "
                               "SignedHeaders=x-mq-date-time, Signature=...'")
        # the credential may carry a scope after the key (the Go client writes AK//Rocketmq): the proxy
        # takes what comes before the first '/'
        ak = m.group("ak").split("/", 1)[0].strip()
        if not ak:
            raise Unauthorized("authentication required: the credential has no access key")
        account = self._accounts.get(ak)
        if account is None:
            raise Unauthorized(f"unknown access key {ak!r}")
        if not date:
            raise Unauthorized("x-mq-date-time header is missing (it is the signed value)")
        self._check_fresh(date)
        if not hmac.compare_digest(sign(account.secret_key, date), m.group("sig").lower()):
            raise Unauthorized(f"signature mismatch for access key {ak!r} (wrong secret key?)")
        with self._lock:
            if len(self._recent) > 10_000:
                self._recent.clear()
            self._recent[(header, date)] = account.identity
        return account.identity

    def _check_fresh(self, date: str) -> None:
        skew = abs(self._clock() - parse_date_time(date))
        # Some clients format local time with a 'Z' suffix: also accept a date
        # that is fresh when read as local time.
        if skew > MAX_CLOCK_SKEW_S:
            local = time.mktime(time.strptime(date, "%Y%m%dT%H%M%SZ"))
            if abs(self._clock() - local) > MAX_CLOCK_SKEW_S:
                raise Unauthorized(f"x-mq-date-time {date} is more than 15 minutes from the broker's clock")


class AuthInterceptor(grpc.ServerInterceptor):
    """Refuses unauthenticated calls with gRPC UNAUTHENTICATED, except on paths that answer in-band.

    The RocketMQ service answers auth failures with an UNAUTHORIZED `Status` in
    its own responses (what RocketMQ clients understand), so its paths are let
    through here and checked in the service.
    """

    def __init__(self, authenticator: Authenticator, *, in_band_prefixes: Sequence[str] = ()) -> None:
        self._auth = authenticator
        self._in_band = tuple(in_band_prefixes)

    def intercept_service(self, continuation, handler_call_details):
        if not self._auth.enabled or handler_call_details.method.startswith(self._in_band):
            return continuation(handler_call_details)
        try:
            self._auth.authenticate(handler_call_details.invocation_metadata)
        except Unauthorized as exc:
            handler = continuation(handler_call_details)
            if handler is None:
                return None
            return refusing_handler(handler, grpc.StatusCode.UNAUTHENTICATED, str(exc))
        return continuation(handler_call_details)
