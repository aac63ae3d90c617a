"""What the daemon's loop consumes: batches of events, each stamped with when it arrived.

`for batch in source.batches(timeout):` as watchfiles' `for changes in watch(...)`: a batch
holds every event that arrived while the loop was busy, or is empty when the wait for one
timed out (a timer tick: a debounce or a periodic job is due). Events are the file signals of
`watch` and the controls the process receives (SIGTERM, SIGHUP, a lost-events warning). The
real source is a queue fed by the event thread and the signal handlers; tests script one on
a fake clock.
"""

import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from memoryd.daemon.watch import Signal


class Control(Enum):
    STOP = "stop"  # SIGTERM, SIGINT, or the embedding owner
    RELOAD = "reload"  # SIGHUP: read the configuration again


@dataclass(frozen=True, slots=True)
class Overflow:
    """File events were lost (the kernel's queue overflowed): look at everything again."""

    detail: str


Event = Signal | Control | Overflow
Batch = list[tuple[float, Event]]  # (the monotonic time it arrived, the event)
Timeout = Callable[[], float | None]  # seconds until the loop has work due; None: none


class EventSource(Protocol):
    def put(self, event: Event) -> None: ...

    def batches(self, timeout: Timeout) -> Iterator[Batch]: ...


@dataclass
class Queued:
    """The real source: any thread (and a signal handler: SimpleQueue.put is reentrant)
    puts; the loop takes what arrived as one batch."""

    clock: Callable[[], float]
    _queue: "queue.SimpleQueue[tuple[float, Event]]" = field(default_factory=queue.SimpleQueue)

    def put(self, event: Event) -> None:
        self._queue.put((self.clock(), event))

    def batches(self, timeout: Timeout) -> Iterator[Batch]:
        while True:
            try:
                first = self._queue.get(timeout=timeout())
            except queue.Empty:
                yield []
                continue
            batch = [first]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            yield batch
