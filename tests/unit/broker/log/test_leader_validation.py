"""The leader refuses batches whose CRCs are valid but whose headers lie (issue 23, findings 3
and 6), with Kafka's error codes, and appends nothing."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from broker.log.config import LogConfig
from broker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    LogStorageError,
    RecordTooLargeError,
)
from broker.log.partition_log import validate_leader_record_set
from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.record_batch import (
    LENGTH_PREFIX_SIZE,
    build_batch,
    check_and_stamp_create_time,
    stamp_all_in_place,
)
from tests.support.lying_batches import one_record_batch, patch_header, with_body
from tests.unit.broker.log.storage_helpers import open_log

NOW = 1_700_000_000_000
HOUR = 3600 * 1000
CONFIG = LogConfig(segment_bytes=1 << 20, retention_ms=-1)


def _idempotent(**fields: int) -> bytes:
    batch = build_batch([(NOW, None, b"v", None)], producer_id=3, producer_epoch=0, base_sequence=0)
    return patch_header(batch, **fields)


@pytest.mark.parametrize(
    ("records", "config", "error", "message"),
    [
        pytest.param(
            patch_header(one_record_batch(timestamp_ms=NOW), record_count=1000),
            CONFIG,
            InvalidRecordError,
            "record count 1000 needs at least",
            id="count-1000-around-one-record",
        ),
        pytest.param(
            patch_header(one_record_batch(timestamp_ms=NOW), record_count=2**31 - 1),
            CONFIG,
            InvalidRecordError,
            "record count 2147483647",
            id="count-int32-max",
        ),
        pytest.param(
            patch_header(one_record_batch(timestamp_ms=NOW), producer_id=-7),
            CONFIG,
            InvalidRecordError,
            "producer id -7",
            id="negative-producer-id",
        ),
        pytest.param(
            _idempotent(producer_epoch=-1),
            CONFIG,
            InvalidRecordError,
            "producer epoch -1",
            id="negative-producer-epoch",
        ),
        pytest.param(
            patch_header(
                one_record_batch(timestamp_ms=NOW),
                first_timestamp_ms=-(2**63),
                max_timestamp_ms=NOW,
            ),
            CONFIG,
            InvalidRecordError,
            "first timestamp",
            id="timestamp-min-int64",
        ),
        pytest.param(
            patch_header(one_record_batch(timestamp_ms=NOW), max_timestamp_ms=2**63 - 1),
            CONFIG,
            InvalidTimestampError,
            "max timestamp 9223372036854775807 is outside",
            id="timestamp-max-int64",
        ),
        pytest.param(
            one_record_batch(timestamp_ms=NOW + HOUR + 1),
            CONFIG,
            InvalidTimestampError,
            "message.timestamp.after.max.ms=3600000",
            id="more-than-an-hour-ahead",
        ),
        pytest.param(
            one_record_batch(timestamp_ms=NOW - 10_001),
            msgspec.structs.replace(CONFIG, timestamp_before_max_ms=10_000),
            InvalidTimestampError,
            "message.timestamp.before.max.ms=10000",
            id="older-than-before-max",
        ),
        pytest.param(
            one_record_batch(b"x" * 2000, timestamp_ms=NOW),
            msgspec.structs.replace(CONFIG, max_message_bytes=1024),
            RecordTooLargeError,
            "max.message.bytes=1024",
            id="too-large",
        ),
    ],
)
def test_leader_refuses_lying_batches(
    tmp_path: Path, records: bytes, config: LogConfig, error: type[MiniKafkaError], message: str
) -> None:
    with pytest.raises(error, match=message) as raised:
        validate_leader_record_set(records, config, now_ms=NOW, log_append_time=False)
    assert raised.value.code in (
        ErrorCode.INVALID_RECORD,
        ErrorCode.INVALID_TIMESTAMP,
        ErrorCode.MESSAGE_TOO_LARGE,
    )
    log = open_log(tmp_path / "orders-0", config)
    with pytest.raises(error):
        log.append_as_leader(records, leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 0
    assert log.size_bytes() == 0
    log.close()


@pytest.mark.parametrize(
    ("records", "log_append_time"),
    [
        pytest.param(one_record_batch(timestamp_ms=NOW), False, id="now"),
        pytest.param(one_record_batch(timestamp_ms=0), False, id="epoch-start-is-not-before-max"),
        pytest.param(one_record_batch(timestamp_ms=NOW + HOUR), False, id="exactly-an-hour-ahead"),
        pytest.param(
            one_record_batch(timestamp_ms=NOW + 10 * HOUR), True, id="log-append-time-restamps"
        ),
        pytest.param(
            build_batch(
                [(NOW, None, b"v", None)], producer_id=3, producer_epoch=32767, base_sequence=5
            ),
            False,
            id="idempotent-at-max-epoch",
        ),
    ],
)
def test_leader_accepts_honest_batches(records: bytes, log_append_time: bool) -> None:
    headers = validate_leader_record_set(
        records, CONFIG, now_ms=NOW, log_append_time=log_append_time
    )
    assert len(headers) == 1


def test_record_framing_walk_is_optional() -> None:
    """Without decoding (the default) a body that is not a record list passes the leader;
    the walk (what Kafka's LogValidator does) catches it."""
    lying = with_body(one_record_batch(timestamp_ms=NOW), msgspec.msgpack.encode([[0, 1, 2, 3, 4]]))
    validate_leader_record_set(lying, CONFIG, now_ms=NOW, log_append_time=False)
    with pytest.raises(InvalidRecordError, match="not a valid record list"):
        validate_leader_record_set(
            lying, CONFIG, now_ms=NOW, log_append_time=False, walk_records=True
        )


_FIELD_VALUES = {
    "producer_id": st.sampled_from([-2, -1, 0, 3, 2**63 - 1]),
    "producer_epoch": st.sampled_from([-32768, -2, -1, 0, 32767]),
    "base_sequence": st.sampled_from([-2, -1, 0, 5]),
    "first_timestamp_ms": st.sampled_from(
        [-2, -1, 0, NOW - 20_000, NOW, NOW + HOUR, NOW + HOUR + 1]
    ),
    "max_timestamp_ms": st.sampled_from([-(2**63), -1, 0, NOW - 20_000, NOW, NOW + HOUR + 1]),
    "record_count": st.sampled_from([-1, 0, 1, 2, 15, 16, 40, 2**31 - 1]),
    "attributes": st.sampled_from([0, 1, 2, 3, 4, 5, 7, 8]),
    "leader_epoch": st.sampled_from([-1, 7]),
    "base_offset": st.sampled_from([0, 99]),
}


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 300),
            st.one_of(
                st.just(frozenset()),
                st.frozensets(st.sampled_from(sorted(_FIELD_VALUES)), max_size=2),
            ),
        ),
        min_size=0,
        max_size=4,
    ),
    st.data(),
    st.one_of(
        st.just(([], 0)),
        st.tuples(
            st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=2),
            st.integers(0, 64),
        ),
    ),
    st.sampled_from([1024, 300, 1024 * 1024]),
    st.sampled_from([2**63 - 1, 10_000]),
)
def test_one_pass_leader_append_agrees_with_the_checks_homes(
    batches: list[tuple[int, frozenset[str]]],
    data: st.DataObject,
    damage: tuple[list[tuple[int, int]], int],
    max_message_bytes: int,
    before_max_ms: int,
) -> None:
    """`check_and_stamp_create_time` (the leader's one-pass CreateTime append) is only a
    shortcut: on any record set (honest, lying headers, flipped bytes, cut short) it
    accepts exactly what `validate_leader_record_set` accepts and stamps exactly the bytes
    `stamp_all_in_place` stamps; it refuses everything else."""
    parts = []
    for size, patched in batches:
        batch = build_batch([(NOW, None, b"v" * size, None)])
        fields = {name: data.draw(_FIELD_VALUES[name]) for name in sorted(patched)}
        parts.append(patch_header(batch, **fields) if fields else batch)
    records = bytearray(b"".join(parts))
    flips, cut = damage
    for where, value in flips:
        if records:
            records[where % len(records)] = value
    if records:
        del records[len(records) - min(cut, len(records) - 1) :]
    config = msgspec.structs.replace(
        CONFIG, max_message_bytes=max_message_bytes, timestamp_before_max_ms=before_max_ms
    )
    try:
        headers = validate_leader_record_set(
            bytes(records), config, now_ms=NOW, log_append_time=False
        )
    except MiniKafkaError:
        expected = None
    else:
        stamped = bytearray(records)
        stamps = stamp_all_in_place(stamped, headers, first_offset=42, leader_epoch=5)
        positions = [s[0] for s in stamps]
        base_offsets = [s[1] for s in stamps]
        next_offset = stamps[-1][1] + headers[-1][1][13]
        largest = max(max(s[2] for s in stamps), -1)
        expected = (bytes(stamped), positions, base_offsets, next_offset, largest)
    buf = bytearray(records)
    checked = check_and_stamp_create_time(
        buf,
        first_offset=42,
        leader_epoch=5,
        max_batch_length=max_message_bytes - LENGTH_PREFIX_SIZE,
        earliest_ms=NOW - before_max_ms,
        latest_ms=NOW + config.timestamp_after_max_ms,
    )
    got = None if checked is None else (bytes(buf), *checked)
    event("refused" if expected is None else "accepted")
    assert got == expected


@pytest.mark.parametrize(
    ("records", "log_append_time", "error", "message"),
    [
        pytest.param(
            one_record_batch(timestamp_ms=NOW), False, LogStorageError, "closed", id="honest"
        ),
        pytest.param(
            one_record_batch(timestamp_ms=NOW),
            True,
            LogStorageError,
            "closed",
            id="honest-log-append-time",
        ),
        pytest.param(
            one_record_batch(timestamp_ms=NOW)[:-1] + b"?",
            False,
            CorruptRecordError,
            "CRC mismatch",
            id="bad-crc",
        ),
        pytest.param(
            one_record_batch(timestamp_ms=NOW + 2 * HOUR),
            False,
            InvalidTimestampError,
            "outside",
            id="future-timestamp",
        ),
        pytest.param(b"", False, InvalidRecordError, "empty record set", id="empty"),
    ],
)
def test_a_closed_log_reports_a_bad_record_set_first(
    tmp_path: Path,
    records: bytes,
    log_append_time: bool,
    error: type[MiniKafkaError],
    message: str,
) -> None:
    """On a closed log a record set the leader refuses gets its own error, as it always
    has (the one-pass append only runs on an open log); an honest one gets the closed
    log's storage error."""
    log = open_log(tmp_path / "orders-0", CONFIG)
    log.close()
    with pytest.raises(error, match=message):
        log.append_as_leader(records, leader_epoch=0, now_ms=NOW, log_append_time=log_append_time)
