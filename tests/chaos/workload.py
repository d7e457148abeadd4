"""The queue workload (WQ/WV): producer and consumer threads driving the real client,
recording every operation in a `History`, and the final-poll protocol (§9.6).

Each producer sends one record per op (a globally unique integer value, as ASCII) to a
seeded-random partition and waits for its outcome: `ok` with the offset, `fail` only
when the failure is definite (a single attempt, `retries=0`, answered with an error that
guarantees nothing was appended), otherwise `info`. After an indefinite outcome the
worker continues under a new process id, as in Jepsen. Consumers poll in assign mode and
record what they read; a consumer whose client raises is replaced (new process id).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from client import Consumer, Producer, TopicPartition
from client.errors import MiniKafkaClientError
from minikafka.errors import ErrorCode
from tests.chaos.history import History, key_of

logger = logging.getLogger(__name__)

#: Errors that prove a single produce attempt appended nothing, when the answer also says
#: it was given before the append (`exc.indefinite` false). NOT_LEADER_OR_FOLLOWER is one
#: of them: the broker marks it indefinite when a parked acks=all request lost the
#: leadership after appending.
DEFINITE_CODES = frozenset(
    {
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUIRED_ACKS,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
    }
)
PROCESS_STRIDE = 1000
VALUE_STRIDE = 10**6


def classify(exc: BaseException, *, single_attempt: bool) -> str:
    """`fail` (definitely not written) or `info` (may or may not have been written).

    Definite only for a single attempt refused with a code of `DEFINITE_CODES` that the
    client does not mark indefinite (an answer given after the append, a timeout or a
    lost connection is indefinite: the write may still be committed)."""
    if (
        single_attempt
        and isinstance(exc, MiniKafkaClientError)
        and exc.errno in DEFINITE_CODES
        and not exc.indefinite
    ):
        return "fail"
    return "info"


class Workload:
    """Producers and consumers over `partitions`, recording into `history`."""

    def __init__(
        self,
        history: History,
        bootstrap: str | Sequence[str],
        partitions: Sequence[TopicPartition],
        *,
        seed: int,
        producers: int = 2,
        consumers: int = 1,
        acks: str = "all",
        retries: int | None = None,
        request_timeout_ms: int = 3000,
        delivery_timeout_ms: int = 12_000,
        ops_per_s: float = 60.0,
        first_worker: int = 1,
        client_config: dict[str, str] | None = None,
    ) -> None:
        """`client_config`: extra settings of every producer and consumer (the security
        settings of a TLS cluster, `ChaosCluster.client_config`)."""
        self.history = history
        self.client_config = dict(client_config or {})
        self.bootstrap = bootstrap
        self.partitions = list(partitions)
        self.seed = seed
        self.acks = acks
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.interval_s = producers / ops_per_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._producers = producers
        self._consumers = consumers
        self._first_worker = first_worker
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self.acked = 0

    # ---- lifecycle ------------------------------------------------------------------

    def start(self) -> Workload:
        for n in range(self._producers):
            worker = self._first_worker + n
            self._spawn(f"producer-{worker}", self._produce_loop, worker)
        for n in range(self._consumers):
            worker = self._first_worker + self._producers + n
            self._spawn(f"consumer-{worker}", self._consume_loop, worker)
        return self

    def _spawn(self, name: str, target: Any, worker: int) -> None:
        def run() -> None:
            try:
                target(worker)
            except BaseException as exc:  # surfaced by stop()
                logger.exception("workload thread %s crashed", name)
                self._errors.append(exc)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive or self._errors:
            raise RuntimeError(f"workload threads stuck {alive} or crashed {self._errors!r}")

    def wait_acked(self, count: int, timeout_s: float = 30.0) -> None:
        """Block until at least `count` sends were acknowledged in total (bounded)."""
        deadline = time.monotonic() + timeout_s
        while self.acked < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.acked} of {count} sends acknowledged")
            if self._errors:
                raise RuntimeError(f"workload crashed: {self._errors!r}")
            self._stop.wait(0.05)

    # ---- producers ------------------------------------------------------------------

    def producer(self) -> Producer:
        idempotent = self.acks == "all" and self.retries != 0
        return Producer(
            bootstrap_servers=self.bootstrap,
            acks=self.acks,
            linger_ms=1,
            retries=self.retries,
            enable_idempotence=idempotent,
            max_in_flight_requests_per_connection=5 if idempotent else 1,
            request_timeout_ms=self.request_timeout_ms,
            delivery_timeout_ms=self.delivery_timeout_ms,
            retry_backoff_ms=100,
            max_block_ms=self.delivery_timeout_ms,
            **self.client_config,
        )

    def _produce_loop(self, worker: int) -> None:
        rng = random.Random(self.seed * 7919 + worker)
        process = worker
        counter = 0
        producer: Producer | None = None
        try:
            while not self._stop.is_set():
                if producer is None:
                    try:
                        producer = self.producer()
                    except MiniKafkaClientError as exc:
                        logger.info("producer %s cannot start yet: %s", worker, exc)
                        self._stop.wait(0.2)
                        continue
                tp = rng.choice(self.partitions)
                key = key_of(tp.topic, tp.partition)
                counter += 1
                value = worker * VALUE_STRIDE + counter
                op = self.history.invoke(process, "send", [["send", key, value]], acks=self.acks)
                try:
                    metadata = producer.send(
                        tp.topic, str(value).encode(), partition=tp.partition
                    ).result(timeout=self.delivery_timeout_ms / 1000 + 10)
                except Exception as exc:
                    outcome = classify(exc, single_attempt=self.retries == 0)
                    self.history.complete(op, outcome, [["send", key, value]], error=repr(exc))
                    if outcome == "info":
                        process += PROCESS_STRIDE
                    continue
                self.history.complete(op, "ok", [["send", key, [metadata.offset, value]]])
                with self._lock:
                    self.acked += 1
                self._stop.wait(self.interval_s * rng.uniform(0.5, 1.5))
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    producer.close()

    # ---- consumers ------------------------------------------------------------------

    def consumer(self) -> Consumer:
        return Consumer(
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=100,
            **self.client_config,
        )

    def _consume_loop(self, worker: int) -> None:
        process = worker
        while not self._stop.is_set():
            try:
                consumer = self.consumer()
            except MiniKafkaClientError as exc:
                logger.info("consumer %s cannot start yet: %s", worker, exc)
                self._stop.wait(0.2)
                continue
            try:
                self._assign(consumer, process)
                while not self._stop.is_set():
                    self._poll(consumer, process, timeout_ms=200)
            except MiniKafkaClientError as exc:
                logger.info("consumer %s (process %s) failed: %s", worker, process, exc)
                self.history.meta(consumer_error=repr(exc), process=process)
                process += PROCESS_STRIDE
            finally:
                with contextlib.suppress(Exception):
                    consumer.close()

    def _assign(self, consumer: Consumer, process: int) -> None:
        keys = [key_of(tp.topic, tp.partition) for tp in self.partitions]
        op = self.history.invoke(process, "assign", keys)
        consumer.assign(self.partitions)
        consumer.seek_to_beginning(*self.partitions)
        self.history.complete(op, "ok", keys)

    def _poll(
        self, consumer: Consumer, process: int, *, timeout_ms: int, final: bool = False
    ) -> dict[str, int]:
        """One poll; records it when it returned anything. Returns {key: last offset}."""
        batches = consumer.poll(timeout_ms=timeout_ms)
        pairs = {
            key_of(tp.topic, tp.partition): [[r.offset, int(r.value)] for r in records]
            for tp, records in batches.items()
            if records
        }
        if pairs:
            op = self.history.invoke(process, "poll", None)
            self.history.complete(op, "ok", [["poll", pairs]], **({"final": True} if final else {}))
        return {key: rows[-1][0] for key, rows in pairs.items()}

    # ---- final polls ----------------------------------------------------------------

    def final_polls(self, timeout_s: float = 60.0, *, process: int = 999) -> None:
        """Read every partition from the beginning with a fresh client, up to its end
        (the high watermark, which is the log end once the cluster has converged).

        Run after the heal and convergence (§9.6). The polls are marked `final`; the
        checker judges `unseen` and `vanished` against them.
        """
        deadline = time.monotonic() + timeout_s
        reached: dict[str, int] = {}
        with self._fresh_consumer(deadline) as consumer:
            self._assign(consumer, process)
            ends = consumer.end_offsets(self.partitions)
            targets = {key_of(tp.topic, tp.partition): end - 1 for tp, end in ends.items()}
            highest = self._highest_offsets()
            self.history.meta(final_poll_targets=targets, highest_offsets_seen=highest)
            while any(reached.get(k, -1) < off for k, off in targets.items()):
                if time.monotonic() > deadline:
                    missing = {k: (reached.get(k, -1), o) for k, o in targets.items()}
                    self.history.meta(final_polls_incomplete=missing)
                    return
                try:
                    polled = self._poll(consumer, process, timeout_ms=500, final=True)
                    for key, last in polled.items():
                        reached[key] = max(reached.get(key, -1), last)
                except MiniKafkaClientError as exc:
                    logger.info("final poll failed (%s); retrying", exc)
                    self._stop.wait(0.2)

    @contextlib.contextmanager
    def _fresh_consumer(self, deadline: float) -> Iterator[Consumer]:
        while True:
            try:
                consumer = self.consumer()
                break
            except MiniKafkaClientError:
                if time.monotonic() > deadline:
                    raise
                self._stop.wait(0.2)
        try:
            yield consumer
        finally:
            consumer.close()

    def _highest_offsets(self) -> dict[str, int]:
        highest: dict[str, int] = {}
        for op in self.history.ops:
            if op["type"] != "ok":
                continue
            for mop in op.get("value") or []:
                if not isinstance(mop, list):
                    continue
                if mop[0] == "send" and isinstance(mop[2], list):
                    highest[mop[1]] = max(highest.get(mop[1], -1), mop[2][0])
                elif mop[0] == "poll":
                    for key, rows in mop[1].items():
                        highest[key] = max(highest.get(key, -1), rows[-1][0])
        return highest
