"""The server's queue: requests wait (a bounded number) while one worker thread generates, and are batched when
their settings agree; a request whose client has gone is dropped, and a batch whose clients have all gone stops
between tokens. The generator is anything with `limits` (textmill.inference.requests.Limits) that generates a
batch's prompts when called (textmill.inference.server.TextGenerator)."""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # torch comes with generation, imported where a request or the model needs it
    from textmill.inference.generate import Generation, SamplingParams

CLIENT_CHECK_SECONDS = 0.2  # how often a request waiting for its answer looks whether its client is still there


class Busy(Exception):
    """The queue is full: answered with HTTP 503 and a Retry-After of `seconds`."""

    def __init__(self, waiting: int, seconds: int):
        super().__init__(f"the server is busy: {waiting} requests wait already (its --max-waiting); retry after "
                         f"{seconds} s")
        self.seconds = seconds


class ClientGone(Exception):
    """The client closed its connection before its answer was ready: nothing is sent."""


@dataclass(eq=False)
class Waiting:
    """A request in the queue: its prompts and settings, the answer its handler waits for, and whether its
    client has gone."""
    prompts: list[list[int]]
    params: SamplingParams
    answer: Future = field(default_factory=Future)
    gone: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Generation on one worker thread. Requests queue up while it works (at most limits.max_waiting); it
    then takes the oldest and every waiting request with the same settings (up to max_prompts prompts) as
    one batch."""

    def __init__(self, generator):
        self.generator = generator
        self.pending: list[Waiting] = []
        self.ready = threading.Condition()
        self.batches = 0
        self.stopped_batches = 0  # given up between tokens: every client of the batch had gone
        self.batch_seconds = 1.0  # how long the last batch took: what a client refused for a full queue waits
        threading.Thread(target=self.work, daemon=True, name="generation").start()

    def __call__(self, prompts: list[list[int]], params: SamplingParams,
                 client_gone: Callable[[], bool]) -> list[Generation]:
        """The request's generations, once its batch is done. Busy when the queue is full; ClientGone (the
        request dropped, or its batch stopped once no one else waits for it) when `client_gone` says so."""
        request = Waiting(prompts, params)
        with self.ready:
            if len(self.pending) >= self.generator.limits.max_waiting:
                raise Busy(len(self.pending), math.ceil(self.batch_seconds))
            self.pending.append(request)
            self.ready.notify()
        while True:
            try:
                return request.answer.result(timeout=CLIENT_CHECK_SECONDS)
            except TimeoutError:
                if client_gone():
                    request.gone.set()
                    with self.ready:
                        if request in self.pending:
                            self.pending.remove(request)
                    raise ClientGone from None

    def next_batch(self) -> list[Waiting]:
        with self.ready:
            while not self.pending:
                self.ready.wait()
            first = self.pending.pop(0)
            batch, rest, count = [first], [], len(first.prompts)
            # A seeded sampling request draws from its own generator; in a batch its draws would depend
            # on the other rows, so it goes alone.
            shareable = first.params.greedy or first.params.seed is None
            for item in self.pending:
                if shareable and item.params == first.params and count + len(item.prompts) <= self.generator.limits.max_prompts:
                    batch.append(item)
                    count += len(item.prompts)
                else:
                    rest.append(item)
            self.pending = rest
            return batch

    def work(self) -> None:
        from textmill.inference.generate import Cancelled

        while True:
            batch = self.next_batch()
            started = time.perf_counter()
            try:
                out = self.generator([p for item in batch for p in item.prompts], batch[0].params,
                                     lambda batch=batch: all(item.gone.is_set() for item in batch))
            except Cancelled:
                self.stopped_batches += 1
                continue
            except Exception as exc:  # reported to each waiting request as a 500
                for item in batch:
                    item.answer.set_exception(exc)
                continue
            self.batches += 1
            self.batch_seconds = time.perf_counter() - started
            for item in batch:
                item.answer.set_result(out[: len(item.prompts)])
                out = out[len(item.prompts) :]
