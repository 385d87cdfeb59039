"""The lab: brokers, etcd and clients as separate hosts on one machine, faults between them, and a
Jepsen-style checker over what the clients saw (docs/lab.md). Not part of the wheel."""
