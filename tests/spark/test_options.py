"""Option parsing: every bad value is refused with an error that names the option."""

import pytest

from txmq.spark.options import InvalidOption, SinkOptions, SourceOptions, parse_duration_ms, sink_id_for_checkpoint

BASE = {"broker": "127.0.0.1:8081", "topic": "orders"}


def parse(streaming=True, **extra):
    return SourceOptions.parse({**BASE, **extra}, streaming=streaming)


def test_minimal_source_options_take_kafka_like_defaults():
    o = parse()
    assert o.topics == ("orders",) and o.starting is None and o.fail_on_data_loss is True
    assert o.max_trigger_delay_ms == 15 * 60_000 and o.max_offsets_per_trigger is None


def test_option_names_are_case_insensitive():
    o = SourceOptions.parse({"BROKER": "h:1", "Topic": "a, b", "MAXOFFSETSPERTRIGGER": "10"}, streaming=True)
    assert o.topics == ("a", "b") and o.max_offsets_per_trigger == 10


def test_several_broker_endpoints_are_accepted():
    assert parse(broker="a:1;b:2").connection.endpoints == "a:1;b:2"


def test_same_host_reads_are_off_unless_asked_for():
    assert parse().connection.local_reads is False
    assert parse(localReads="true").connection.local_reads is True


@pytest.mark.parametrize("options, named", [
    ({"localReads": "sometimes"}, "localReads"),
    ({"broker": None}, "broker"),
    ({"broker": "nohostport"}, "broker"),
    ({"broker": "h:99999"}, "broker"),
    ({"topic": None}, "topic"),
    ({"topicPattern": "x.*"}, "topic"),
    ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"minOffsetsPerTrigger": "-3"}, "minOffsetsPerTrigger"),
    ({"minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "10"}, "minOffsetsPerTrigger"),
    ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"startingOffsets": "oldest"}, "startingOffsets"),
    ({"startingOffsets": '{"orders": {"x": 1}}'}, "startingOffsets"),
    ({"startingOffsets": '{"orders": {"0": -5}}'}, "startingOffsets"),
    ({"startingOffsets": '{"orders": {"0": 1.5}}'}, "startingOffsets"),
    ({"startingOffsets": "earliest", "startingTimestamp": "5"}, "startingTimestamp"),
    ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"endingOffsets": "latest"}, "endingOffsets"),
    ({"tags": "A || "}, "tags"),
    ({"accessKey": "ak"}, "accessKey"),
    ({"consumerGroup": "bad group!"}, "consumerGroup"),
    ({"noSuchOption": "1"}, "nosuchoption"),
])
def test_bad_source_option_is_refused_naming_it(options, named):
    opts = {**BASE, **options}
    opts = {k: v for k, v in opts.items() if v is not None}
    with pytest.raises(InvalidOption, match=named):
        SourceOptions.parse(opts, streaming=True)


def test_ending_offsets_are_for_batch_queries():
    assert parse(streaming=False, endingOffsets='{"orders": {"0": 5, "1": -1}}').ending == {"orders": {("", 0): 5, ("", 1): -1}}
    with pytest.raises(InvalidOption, match="endingOffsets"):
        parse(streaming=False, endingOffsets='{"orders": {"0": -2}}')


def test_starting_latest_is_refused_in_batch_queries():
    with pytest.raises(InvalidOption, match="startingOffsets"):
        parse(streaming=False, startingOffsets="latest")


def test_topic_pattern_must_be_a_regex():
    with pytest.raises(InvalidOption, match="topicPattern"):
        SourceOptions.parse({"broker": "h:1", "topicPattern": "("}, streaming=True)


@pytest.mark.parametrize("text, ms", [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("2 minutes", 120_000),
                                      ("1h", 3_600_000), ("250", 250)])
def test_durations_parse_with_units(text, ms):
    assert parse_duration_ms("maxTriggerDelay", text, 0) == ms


def test_sink_id_derives_from_the_checkpoint_location_stably():
    a = SinkOptions.parse({"broker": "h:1", "checkpointLocation": "/tmp/ck"}).sink_id
    assert a == SinkOptions.parse({"broker": "h:1", "checkpointLocation": "file:///tmp/ck/"}).sink_id
    assert a != sink_id_for_checkpoint("/tmp/other")


def test_explicit_sink_id_wins_and_is_validated():
    assert SinkOptions.parse({"broker": "h:1", "sinkId": "s1", "checkpointLocation": "/x"}).sink_id == "s1"
    with pytest.raises(InvalidOption, match="sinkId"):
        SinkOptions.parse({"broker": "h:1", "sinkId": "has space"})
