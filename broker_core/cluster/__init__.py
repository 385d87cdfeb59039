"""Broker groups: a leader and its followers replicating the CommitLog, coordinated by etcd.

coordination.py speaks to etcd (leases, the leader key, epochs, the in-sync set);
epochs.py keeps a replica's leader-epoch file; replication.py is the leader's side
(serving fetches, the in-sync set, the confirmed offset) and the follower's (fetching,
cutting a divergent tail); roles.py routes client calls by role (served, or forwarded
to the leader); node.py runs one replica through its roles. See docs/replication.md.
"""
