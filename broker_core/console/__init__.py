"""The txmq console: web pages where operators see the cluster, the transactions in flight,
topics, consumer groups and messages (`txmq console --broker H:P[,H:P...]`).

A Starlette app rendering Jinja2 templates, refreshed in place by htmx, with charts drawn by
uPlot (both vendored under static/, licences in static/THIRD_PARTY_LICENSES.txt). It talks to
brokers only through the public client (client/cluster_client.py): every number on a page is
one a native call answered. Installed with the `console` extra (`pip install 'txmq[console]'`).
"""
