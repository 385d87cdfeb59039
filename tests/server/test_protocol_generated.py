"""The committed protocol code matches the .proto sources and coexists with the official client."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from txmq.broker.protocol import generate, rocketmq_v2_pb2 as pb
from txmq.broker.protocol.rocketmq_methods import ROCKETMQ_METHODS, ROCKETMQ_METHODS_BY_NAME, UNARY_STREAM, STREAM_STREAM

ROOT = Path(__file__).resolve().parents[2]
RMQ_SITE = next(iter((ROOT / ".venv-rocketmq" / "lib").glob("python3*/site-packages")), None)


def test_committed_modules_equal_a_fresh_generation(tmp_path):
    fresh = generate.generate_to(tmp_path)
    assert "rocketmq_v2_pb2.py" in fresh
    assert fresh == {name: generate.committed_modules()[name] for name in fresh}, \
        "generated protocol modules are stale: run `make proto`"


def test_proto_package_is_not_apache_so_both_can_share_a_process():
    assert pb.DESCRIPTOR.package == "txmq.rocketmq.v2"
    assert pb.DESCRIPTOR.name == "txmq/broker/protocol/rocketmq_v2.proto"


def test_method_table_uses_rocketmq_service_paths_and_kinds():
    assert all(m.path.startswith("/apache.rocketmq.v2.MessagingService/") for m in ROCKETMQ_METHODS)
    assert ROCKETMQ_METHODS_BY_NAME["ReceiveMessage"].kind == UNARY_STREAM
    assert ROCKETMQ_METHODS_BY_NAME["PullMessage"].kind == UNARY_STREAM
    assert ROCKETMQ_METHODS_BY_NAME["Telemetry"].kind == STREAM_STREAM
    for name in ("QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment", "AckMessage",
                 "ForwardMessageToDeadLetterQueue", "UpdateOffset", "GetOffset", "QueryOffset",
                 "EndTransaction", "NotifyClientTermination", "ChangeInvisibleDuration"):
        assert name in ROCKETMQ_METHODS_BY_NAME


def test_field_numbers_match_rocketmq_v2():
    sp = pb.SystemProperties.DESCRIPTOR.fields_by_name
    assert sp["message_id"].number == 3 and sp["receipt_handle"].number == 12
    assert sp["delivery_attempt"].number == 16 and sp["dead_letter_queue"].number == 20
    assert pb.SendResultEntry.DESCRIPTOR.fields_by_name["recall_handle"].number == 5
    assert pb.TelemetryCommand.DESCRIPTOR.fields_by_name["recover_orphaned_transaction_command"].number == 5
    assert pb.Code.Value("MESSAGE_BODY_EMPTY") == 41302 and pb.Code.Value("OFFSET_NOT_FOUND") == 40404


@pytest.mark.interop
@pytest.mark.skipif(RMQ_SITE is None or not (RMQ_SITE / "rocketmq").exists(),
                    reason="official client not installed: run `make interop-venv`")
def test_txmq_protocol_and_official_client_import_in_one_process():
    script = textwrap.dedent(f"""
        import sys
        sys.path.append({str(RMQ_SITE)!r})
        from txmq.broker.protocol import rocketmq_v2_pb2 as ours
        from rocketmq.grpc_protocol import definition_pb2, service_pb2
        import rocketmq
        from txmq.broker.protocol import status
        theirs = service_pb2.SendMessageRequest()
        m = theirs.messages.add(body=b"x")
        m.topic.name = "t"
        m.system_properties.message_id = "id-1"
        # the same bytes decode as our type: the wire is identical
        mine = ours.SendMessageRequest.FromString(theirs.SerializeToString())
        assert mine.messages[0].system_properties.message_id == "id-1"
        back = service_pb2.SendMessageResponse.FromString(
            ours.SendMessageResponse(status=status.ok()).SerializeToString())
        assert back.status.code == definition_pb2.Code.OK
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr
