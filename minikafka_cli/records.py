"""`minikafka produce` and `minikafka consume` (Kafka's console producer and consumer)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable
from typing import Any

import click

from minikafka.errors import MiniKafkaError
from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    GracefulStop,
    bootstrap_option,
    client_security,
    config_file_option,
    describe_topics,
    error_text,
    fail,
    key_values,
    one_topic,
    opt,
)
from minikafka_cli.line_reader import (
    LineError,
    LineFormat,
    LineFormatError,
    line_format,
    parse_line,
)
from minikafka_cli.record_format import (
    FormatError,
    TextFormat,
    format_json,
    format_text,
    text_format,
)

ACKS = click.Choice(["all", "-1", "0", "1"])

#: The producer's request timeout (the client's default) unless the delivery timeout is
#: shorter.
REQUEST_TIMEOUT_MS = 30_000


def _read_lines(stream: Any) -> Iterable[bytes]:
    """The lines of a binary stream without their line ending (LF or CRLF)."""
    for raw in stream:
        line: bytes = raw
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


def _preview(line: bytes, limit: int = 60) -> str:
    text = line[:limit].decode("utf-8", "backslashreplace")
    return repr(text + ("..." if len(line) > limit else ""))


@click.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("topic_arg", metavar="[TOPIC]", required=False)
@opt("--topic", help="Topic to write to (or give it as the argument).")
@opt(
    "--key-separator",
    help="Split each line into key and value at the first separator (a line without it "
    "is an error); the same as --property parse.key=true --property key.separator=SEP.",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A line-reader property of kafka-console-producer.sh: parse.key, parse.headers, "
    "ignore.error (true/false), key.separator (tab), headers.delimiter (tab), "
    "headers.separator (,), headers.key.separator (:), null.marker (a key or value equal "
    "to it is sent as null) (repeatable). A line reads HEADERS<delimiter>KEY<separator>VALUE "
    "with the parts asked for, e.g. --property parse.key=true --property key.separator=:.",
)
@opt("--partition", type=click.IntRange(min=0), help="Write every record to this partition.")
@opt("--acks", type=ACKS, default="all", show_default=True, help="0, 1 or all (-1).")
@opt(
    "--compression",
    type=click.Choice(["none", "gzip", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@opt("--header", "headers", multiple=True, metavar="KEY=VALUE", help="Header for every record.")
@opt("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@opt(
    "--max-block-ms",
    type=click.IntRange(min=0),
    default=60_000,
    show_default=True,
    help="How long to wait for the topic's metadata (e.g. a topic being created) and "
    "for buffer space before failing.",
)
@opt(
    "--delivery-timeout-ms",
    type=click.IntRange(min=1),
    default=120_000,
    show_default=True,
    help="Fail when a record is not acknowledged within this time (retriable errors such "
    "as NOT_ENOUGH_REPLICAS are retried until then).",
)
def produce(
    topic_arg: str | None,
    bootstrap_server: str,
    topic: str | None,
    key_separator: str | None,
    properties: tuple[str, ...],
    partition: int | None,
    acks: str,
    compression: str,
    headers: tuple[str, ...],
    linger_ms: int,
    max_block_ms: int,
    delivery_timeout_ms: int,
) -> None:
    """Read lines from stdin and write each as one record; prints nothing on success.

    The topic is `--topic T` (as kafka-console-producer) or the argument TOPIC. Every
    record is acknowledged (per --acks) before the command exits with status 0; on
    Ctrl-C the lines read so far are still sent.
    """
    from client import Producer

    name = one_topic(topic_arg, topic)
    if key_separator is not None and not key_separator:
        raise click.BadParameter("must not be empty", param_hint="'--key-separator'")
    base = (
        LineFormat(parse_key=True, key_separator=key_separator.encode()) if key_separator else None
    )
    try:
        fmt = line_format(key_values(properties, "--property"), base)
    except LineFormatError as exc:
        raise click.BadParameter(str(exc), param_hint="'--property'") from exc
    header_list = [(k, v.encode()) for k, v in key_values(headers, "--header").items()]
    if delivery_timeout_ms <= linger_ms:
        raise click.UsageError(
            f"--delivery-timeout-ms ({delivery_timeout_ms}) must be larger than --linger-ms "
            f"({linger_ms})"
        )
    producer = Producer(
        bootstrap_servers=bootstrap_server,
        acks={"all": -1, "-1": -1, "0": 0, "1": 1}[acks],
        compression_type=None if compression == "none" else compression,
        linger_ms=linger_ms,
        max_block_ms=max_block_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        # The client wants delivery >= linger + request timeout (as Kafka's does).
        request_timeout_ms=min(REQUEST_TIMEOUT_MS, delivery_timeout_ms - linger_ms),
        **client_security(),
    )
    futures = []
    try:
        for number, line in enumerate(_read_lines(sys.stdin.buffer), start=1):
            try:
                record = parse_line(line, fmt)
            except LineError as exc:
                fail(f"line {number} {exc}: {_preview(line)}")
            record_headers = record.headers + header_list
            futures.append(
                producer.send(
                    name,
                    record.value,
                    key=record.key,
                    partition=partition,
                    headers=record_headers or None,
                )
            )
        producer.flush()
        for future in futures:
            future.result()
    except MiniKafkaError as exc:
        fail(f"produce failed: {error_text(exc)}")
    finally:
        producer.close()


def _parse_offset(value: str | None) -> int | str | None:
    """Kafka's --offset: a non-negative offset, `earliest` or `latest`."""
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("earliest", "latest"):
        return text
    if text.isascii() and text.isdigit() and int(text) <= OFFSET_MAX:
        return int(text)
    raise click.BadParameter(
        f"{value!r} is not an offset: give a number in [0, {OFFSET_MAX}], earliest or latest",
        param_hint="'--offset'",
    )


#: Offsets are int64 on the wire.
OFFSET_MAX = 2**63 - 1


@click.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("topic_arg", metavar="[TOPIC]", required=False)
@opt("--topic", help="Topic to read (or give it as the argument).")
@opt("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@opt(
    "--group",
    help="Consume as a member of this consumer group: the group's partitions, from its "
    "committed offsets, committing what was printed (auto-commit, and on exit).",
)
@opt(
    "--from-beginning",
    is_flag=True,
    help="Start at the earliest offset (default: the end); with --group, only for "
    "partitions without a committed offset.",
)
@opt(
    "--offset",
    metavar="OFFSET",
    help="Start at this offset, or earliest / latest (needs --partition).",
)
@opt("--max-messages", type=click.IntRange(min=1), help="Exit after this many records.")
@opt(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="Exit when no record arrives for this long (default: wait forever).",
)
@opt("--print-key", is_flag=True, help="Print KEY<separator>VALUE (a missing key as null).")
@opt("--print-offset", is_flag=True, help="Prefix each line with partition:offset.")
@opt("--key-separator", default="\t", show_default="tab")
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A formatter property of kafka-console-consumer.sh: print.timestamp, "
    "print.partition, print.offset, print.headers, print.key, print.value (true/false), "
    "key.separator, line.separator, headers.separator, headers.key.separator, null.literal "
    "(repeatable). E.g. --property print.timestamp=true --property print.offset=true.",
)
@opt(
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per record and line (topic, partition, offset, timestamp, "
    "timestampType, key, value, headers; bytes that are not UTF-8 as key_base64 / "
    "value_base64).",
)
def consume(
    topic_arg: str | None,
    bootstrap_server: str,
    topic: str | None,
    partition: int | None,
    group: str | None,
    from_beginning: bool,
    offset: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_offset: bool,
    key_separator: str,
    properties: tuple[str, ...],
    output: str,
) -> None:
    """Print records of a topic, one per line (values as they are; a missing value as null).

    The topic is `--topic T` (as kafka-console-consumer) or the argument TOPIC. Exits
    after --max-messages records or --timeout-ms without one (status 0), or on Ctrl-C
    (status 130, as Kafka's console consumer). With --group it commits the offsets of
    the records it printed and leaves the group before it exits (also on SIGTERM, with
    status 143), so the next run with the same group goes on where this one stopped.
    """
    from client import Admin, Consumer, TopicPartition

    name = one_topic(topic_arg, topic)
    try:
        fmt = text_format(
            key_values(properties, "--property"),
            TextFormat(print_key=print_key, key_separator=key_separator.encode()),
        )
    except FormatError as exc:
        raise click.BadParameter(str(exc), param_hint="'--property'") from exc
    if output == "json" and (properties or print_key or print_offset):
        raise click.UsageError(
            "--output json prints every field of each record: it takes no --property, "
            "--print-key or --print-offset"
        )
    if group is not None and partition is not None:
        raise click.UsageError("Options group and partition cannot be specified together.")
    if group is not None and not group.strip():
        raise click.BadParameter("must not be empty", param_hint="'--group'")
    start = _parse_offset(offset)
    stop: GracefulStop | None = None
    if group is not None:
        # A member stopped by Ctrl-C or SIGTERM (a service manager, `timeout`) finishes
        # printing what it polled, commits exactly that and leaves the group, so the
        # group rebalances at once and the next member starts after the last line shown.
        stop = GracefulStop()
    if start is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if start is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    # The consumer first: it fails at once when no broker answers.
    with Consumer(
        bootstrap_servers=bootstrap_server,
        # Where to start, also for --offset earliest / latest: a partition starts at the
        # reset position (a seek_to_beginning() right after assign() can lose the race
        # with that reset).
        auto_offset_reset="earliest" if from_beginning or start == "earliest" else "latest",
        group_id=group,
        **client_security(),
    ) as consumer:
        with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
            (described,) = describe_topics(admin, [name])
        partitions = sorted(p.partition for p in described.partitions)
        if partition is not None and partition not in partitions:
            fail(
                f"partition {partition} of topic {name!r} does not exist "
                f"(it has {len(partitions)} partition{'s' if len(partitions) != 1 else ''})"
            )
        if partition is not None:
            tp = TopicPartition(name, partition)
            consumer.assign([tp])
            if isinstance(start, int):
                _warn_outside_log(consumer, tp, start)
                consumer.seek(tp, start)
        else:
            consumer.subscribe([name])
        if stop is not None:
            stop.install()
        try:
            _print_records(
                consumer,
                max_messages=max_messages,
                timeout_ms=timeout_ms,
                fmt=None if output == "json" else fmt,
                print_offset=print_offset,
                stop=stop,
            )
        finally:
            if stop is not None:
                stop.closing = True  # leaving `with` commits and leaves: not interrupted
    if stop is not None:
        stop.exit_if_requested()


def _warn_outside_log(consumer: Any, tp: Any, offset: int) -> None:
    """Kafka resets an offset outside the log to the end (or, with --from-beginning, the
    start) without a word; we do the same, but say so."""
    first = consumer.beginning_offsets([tp])[tp]
    end = consumer.end_offsets([tp])[tp]
    if first <= offset <= end:
        return
    click.echo(
        f"Warning: offset {offset} is outside {tp.topic}-{tp.partition} (offsets {first} to "
        f"{end}); reading from the end",
        err=True,
    )


def _print_records(
    consumer: Any,
    *,
    max_messages: int | None,
    timeout_ms: int | None,
    fmt: TextFormat | None,
    print_offset: bool,
    stop: GracefulStop | None = None,
) -> None:
    """Print polled records: Kafka's formatter with `fmt`, JSON lines without. Returns
    after a whole polled batch once `stop` is requested. A batch cut short (a closed
    pipe, a second Ctrl-C) seeks each of its partitions back to the first record not
    printed, as Kafka's console consumer does, so a group commits only what was shown."""
    import time

    out = sys.stdout.buffer
    seen = 0
    idle_since = time.monotonic()
    while (max_messages is None or seen < max_messages) and not (stop and stop.requested):
        wait_ms = 200
        if timeout_ms is not None:
            left_ms = timeout_ms - (time.monotonic() - idle_since) * 1000
            wait_ms = int(min(wait_ms, max(left_ms, 0)))
        limit = None if max_messages is None else max_messages - seen
        batch = consumer.poll(timeout_ms=wait_ms, max_records=limit)
        if not batch:
            if timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                break
            continue
        idle_since = time.monotonic()
        #: Per partition of the batch, the offset of its first record not printed yet.
        unprinted = {tp: records[0].offset for tp, records in batch.items() if records}
        try:
            for tp, records in batch.items():
                for record in records:
                    if max_messages is not None and seen >= max_messages:
                        break  # never more than asked for; the rest is sought back to
                    if fmt is None:
                        out.write(format_json(record))
                    else:
                        if print_offset:
                            out.write(f"{record.partition}:{record.offset}\t".encode())
                        out.write(format_text(record, fmt))
                    seen += 1
                    unprinted[tp] = record.offset + 1
                else:
                    unprinted.pop(tp, None)
            out.flush()
        finally:
            for tp, offset in unprinted.items():
                with contextlib.suppress(Exception):
                    consumer.seek(tp, offset)
