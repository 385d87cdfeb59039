"""`python -m txmq.broker.server --data-dir DIR --listen HOST:PORT ...` runs a broker."""

from txmq.broker.server.broker import run_broker

raise SystemExit(run_broker())
