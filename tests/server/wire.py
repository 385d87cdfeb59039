"""A raw RocketMQ 5 wire client for tests: one callable per RPC of the method table, plus helpers."""

from __future__ import annotations

import time
import uuid

import grpc

from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.protocol.rocketmq_methods import ROCKETMQ_METHODS, UNARY_STREAM, UNARY_UNARY


class Wire:
    def __init__(self, endpoint: str, *, client_id: str | None = None, ak: str | None = None,
                 sk: str | None = None, channel: grpc.Channel | None = None) -> None:
        self.endpoint = endpoint
        self.ak, self.sk = ak, sk
        self.channel = channel or grpc.insecure_channel(endpoint)
        self.client_id = client_id or f"test-{uuid.uuid4().hex[:12]}"
        self._calls = {}
        for m in ROCKETMQ_METHODS:
            if m.kind == UNARY_UNARY:
                self._calls[m.name] = self.channel.unary_unary(
                    m.path, request_serializer=m.request_class.SerializeToString,
                    response_deserializer=m.response_class.FromString)
            elif m.kind == UNARY_STREAM:
                self._calls[m.name] = self.channel.unary_stream(
                    m.path, request_serializer=m.request_class.SerializeToString,
                    response_deserializer=m.response_class.FromString)

    def metadata(self):
        date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        md = [("x-mq-client-id", self.client_id), ("x-mq-language", "PYTHON"), ("x-mq-date-time", date)]
        if self.ak is not None:
            from txmq.broker.server.auth import authorization_header
            md.append(("authorization", authorization_header(self.ak, self.sk or "", date)))
        return md

    def call(self, rpc: str, request, timeout: float = 10.0):
        fn = self._calls[rpc]
        result = fn(request, metadata=self.metadata(), timeout=timeout)
        return list(result) if not hasattr(result, "status") else result

    def raw(self, path: str, payload: bytes, *, stream: bool = False, timeout: float = 10.0) -> list[bytes]:
        """Send raw bytes to a method path; return raw response messages."""
        ident = lambda b: b  # noqa: E731
        if stream:
            fn = self.channel.unary_stream(path, request_serializer=ident, response_deserializer=ident)
            return list(fn(payload, metadata=self.metadata(), timeout=timeout))
        fn = self.channel.unary_unary(path, request_serializer=ident, response_deserializer=ident)
        return [fn(payload, metadata=self.metadata(), timeout=timeout)]

    def close(self) -> None:
        self.channel.close()

    # --- helpers ---------------------------------------------------------------------

    def send(self, topic: str, bodies: list[bytes], *, mtype=pb.NORMAL, group: str | None = None,
             tag: str | None = None) -> pb.SendMessageResponse:
        req = pb.SendMessageRequest()
        for body in bodies:
            m = req.messages.add(body=body)
            m.topic.name = topic
            m.system_properties.message_id = uuid.uuid4().hex.upper()
            m.system_properties.message_type = mtype
            m.system_properties.body_encoding = pb.IDENTITY
            if group:
                m.system_properties.message_group = group
            if tag:
                m.system_properties.tag = tag
        return self.call("SendMessage", req)

    def end(self, topic: str, tx_id: str, resolution=pb.COMMIT) -> pb.EndTransactionResponse:
        return self.call("EndTransaction", pb.EndTransactionRequest(
            topic=pb.Resource(name=topic), transaction_id=tx_id, resolution=resolution, source=pb.SOURCE_CLIENT))

    def queue_count(self, topic: str) -> int:
        r = self.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
        assert r.status.code == pb.OK, r.status
        return len(r.message_queues)

    def pull_all(self, topic: str, group: str = "pull-group") -> list[pb.Message]:
        """Every message of every queue of `topic`, via PullMessage."""
        out = []
        for qid in range(self.queue_count(topic)):
            offset = 0
            while True:
                req = pb.PullMessageRequest(offset=offset, batch_size=64)
                req.group.name = group
                req.message_queue.topic.name = topic
                req.message_queue.id = qid
                responses = self.call("PullMessage", req)
                msgs = [r.message for r in responses if r.WhichOneof("content") == "message"]
                nxt = [r.next_offset for r in responses if r.WhichOneof("content") == "next_offset"]
                out.extend(msgs)
                if not msgs or not nxt or nxt[0] == offset:
                    break
                offset = nxt[0]
        return out

    def receive(self, topic: str, group: str, *, batch: int = 32, invisible_s: int = 10,
                poll_s: float = 0.0) -> tuple[pb.Status, list[pb.Message]]:
        req = pb.ReceiveMessageRequest(batch_size=batch)
        req.group.name = group
        req.message_queue.topic.name = topic
        req.invisible_duration.seconds = invisible_s
        req.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
        responses = self.call("ReceiveMessage", req, timeout=poll_s + 10)
        status = [r.status for r in responses if r.WhichOneof("content") == "status"][0]
        return status, [r.message for r in responses if r.WhichOneof("content") == "message"]
