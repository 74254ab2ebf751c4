"""`--workers N`: N long-lived worker processes, each a Luigi worker that runs its tasks one after another in
itself, all asking one scheduler for work.

Luigi's own `workers=N` starts a process per task: each paid a fork, the imports its stage needs (datasketch,
pandas through pyarrow: most of a small task's time) and an exit, so a second worker made a stage slower. Here
the processes are forked once, after this one has built the graph (its keys are memos the workers inherit), and
each imports a library once. Without a central scheduler they share one served from a thread of this process on
127.0.0.1 (Luigi's own scheduler and HTTP API, as luigid serves them); with one, they ask it.

A worker process dies with this one (the kernel signals it: Linux's parent-death signal), and holds no copy of
the run's lock (runner.work_lock), so a killed run leaves nothing working on and nothing locked.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
from typing import Iterator

import luigi
import luigi.scheduler

# The run's lock file while this process holds it (runner.work_lock): a forked child closes its copy at once.
HELD_LOCKS: set[int] = set()
PR_SET_PDEATHSIG = 1


def close_held_locks() -> None:
    for fd in HELD_LOCKS:
        with contextlib.suppress(OSError):
            os.close(fd)
    HELD_LOCKS.clear()


os.register_at_fork(after_in_child=close_held_locks)


def die_with_parent(parent: int) -> None:
    """Ask the kernel to end this process when its parent ends (SIGTERM; Linux), and end now if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


@contextlib.contextmanager
def served_scheduler() -> Iterator[tuple[str, callable]]:
    """A Luigi scheduler for this run alone on 127.0.0.1 (a free port): (its URL, start). The socket is bound
    at once, so workers forked before `start()` can connect; requests wait in its backlog until the thread
    serving it starts, after the forks (forking a process that runs other threads is not safe)."""
    import tornado.httpserver
    import tornado.netutil
    from luigi.server import app

    scheduler = luigi.scheduler.Scheduler(prune_on_get_work=True, record_task_history=False)
    sockets = tornado.netutil.bind_sockets(0, address="127.0.0.1")
    url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
    loop = asyncio.new_event_loop()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        tornado.httpserver.HTTPServer(app(scheduler)).add_sockets(sockets)
        loop.run_forever()

    thread = threading.Thread(target=serve, name="textmill-scheduler", daemon=True)
    try:
        yield url, thread.start
    finally:
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        for sock in sockets:
            sock.close()


def build(targets: list[luigi.Task], workers: int, scheduler_url: str | None, factory, **options) -> str:
    """Run `targets` by `workers` Luigi workers (on `scheduler_url`, or a scheduler of their own); the workers'
    summaries. `factory`: the worker and scheduler factory luigi.build takes; `options`: luigi.build's others."""
    if workers == 1:
        where = {"scheduler_url": scheduler_url} if scheduler_url else {"local_scheduler": True}
        return luigi.build(targets, workers=1, worker_scheduler_factory=factory, detailed_summary=True, **where,
                           **options).summary_text
    if scheduler_url is None:
        ask_often()
    with served_scheduler() if scheduler_url is None else contextlib.nullcontext((scheduler_url, None)) as (url, start):
        context = multiprocessing.get_context("fork")
        parent, pipes, processes = os.getpid(), [], []
        for _ in range(workers):
            receiver, sender = context.Pipe(duplex=False)
            # Not daemonic: a task may start processes of its own (the scrape's extraction workers).
            process = context.Process(target=work, args=(targets, url, factory, options, sender, parent))
            process.start()
            sender.close()
            pipes.append(receiver)
            processes.append(process)
        if start:
            start()
        summaries = []
        for process, receiver in zip(processes, pipes):
            with contextlib.suppress(EOFError):  # a worker that died said nothing
                summaries.append(receiver.recv())
            process.join()
    return "\n".join(summaries)


def ask_often() -> None:
    """An idle worker asks its own scheduler for work every 0.1 s (Luigi waits 1 to 6 s, to spare a luigid many
    machines share), unless the user's luigi.cfg says otherwise: a task whose input another worker is finishing
    starts when it is done."""
    config = luigi.configuration.get_config()
    for option, value in (("wait_interval", "0.1"), ("wait_jitter", "0.0")):
        if not config.has_option("worker", option):
            config.set("worker", option, value)


def work(targets: list[luigi.Task], url: str, factory, options: dict, sender, parent: int) -> None:
    """One worker process: a Luigi worker on the scheduler at `url` until the targets are done or nothing more
    can run; its summary goes back through `sender`."""
    die_with_parent(parent)
    result = luigi.build(targets, workers=1, scheduler_url=url, worker_scheduler_factory=factory,
                         detailed_summary=True, **options)
    sender.send(result.summary_text)
    sender.close()
