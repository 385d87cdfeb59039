"""The tlsCaFile option names a file on the driver's host; executors on other hosts do not have it.
The connector reads it once on the driver, ships its contents with the options (pickled to every
task), and each executor writes them to a file of its own host for the client."""

from __future__ import annotations

import pickle
import shutil
import uuid

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.tls import self_signed
from txmq.broker.client import Message, NativeClient
from txmq.spark.options import InvalidOption, SourceOptions

pytestmark = pytest.mark.spark


def test_the_ca_bundle_travels_with_the_options_to_a_host_without_the_file(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n")
    conn = SourceOptions.parse({"broker": "b:1", "topic": "t", "tlsCaFile": str(ca)}, streaming=False).connection
    ca.unlink()  # as on an executor's host: the driver's path names nothing there
    on_executor = pickle.loads(pickle.dumps(conn)).ca_file_on_this_host()
    assert on_executor != str(ca)
    assert open(on_executor, "rb").read().endswith(b"stand-in\n-----END CERTIFICATE-----\n")


def test_an_unreadable_ca_file_is_refused_on_the_driver_in_one_line(tmp_path):
    with pytest.raises(InvalidOption, match=r"option 'tlsCaFile': cannot read '.*absent.pem' on the driver"):
        SourceOptions.parse({"broker": "b:1", "topic": "t", "tlsCaFile": str(tmp_path / "absent.pem")},
                            streaming=False)


def test_a_tls_broker_is_read_with_the_ca_given_by_tls_ca_file(spark, tmp_path):
    cert, key = self_signed(tmp_path / "tls")
    ca = tmp_path / "driver-only-ca.pem"
    shutil.copy(cert, ca)
    with BrokerProcess(tmp_path / "data", extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as broker:
        topic = f"tls-{uuid.uuid4().hex[:8]}"
        with NativeClient(broker.endpoint, tls=True, ca_file=str(ca)) as client:
            client.create_topic(topic, 2)
            client.send([Message(topic, b"m%d" % i) for i in range(10)])
        rows = (spark.read.format("txmq").option("broker", broker.endpoint).option("topic", topic)
                .option("tlsCaFile", str(ca)).load().select("body").collect())
    assert sorted(r.body for r in rows) == sorted(b"m%d" % i for i in range(10))
