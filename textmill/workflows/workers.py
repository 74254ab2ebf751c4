"""`--workers N`: N long-lived worker processes, each a Luigi worker that runs its tasks one after another in
itself, all asking one scheduler for work.

Luigi's own `workers=N` starts a process per task: each paid a fork, the imports its stage needs (datasketch,
pandas through pyarrow where it is installed: most of a small task's time) and an exit, so a second worker made a
stage slower. Here the processes are forked once, after this one has walked the graph and imported its tasks' libraries
(framework.warm), which they inherit. One of them schedules the graph (an add_task per task); the others are
Luigi's assistants, which run whatever the scheduler hands them, so the graph is registered once per command,
not once per worker. They share a scheduler served from a thread of this process on 127.0.0.1 (Luigi's own
scheduler and HTTP API, as luigid serves them). With a central scheduler (luigid), Luigi's own worker runs a
process per task, forked from this process after the same warm-up.

While a build runs, every process forked from this one or from those (a worker, Luigi's process per task, a
scrape's extraction process) dies with the process that forked it (the kernel signals it: Linux's parent-death
signal), and none holds a copy of the run's lock (runner.work_lock), so a killed run leaves nothing working on
and nothing locked.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import threading
from typing import Iterator

import luigi
import luigi.scheduler

# The run's lock file while this process holds it (runner.work_lock): a forked child closes its copy at once.
HELD_LOCKS: set[int] = set()
PR_SET_PDEATHSIG = 1
# While a build runs: every process forked from this one, or from those (a worker, Luigi's process per task with a
# central scheduler, a scrape's extraction process), dies with the process that forked it.
TIED = False
forking = 0  # the pid of the process that forks, for the child to check


def before_fork() -> None:
    global forking
    forking = os.getpid()


def in_forked_child() -> None:
    for fd in HELD_LOCKS:
        with contextlib.suppress(OSError):
            os.close(fd)
    HELD_LOCKS.clear()
    if TIED:
        die_with_parent(forking)


os.register_at_fork(before=before_fork, after_in_child=in_forked_child)


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
        loop.close()
        for sock in sockets:
            sock.close()


def build(targets: list[luigi.Task], workers: int, scheduler_url: str | None, factory, **options) -> str:
    """Run `targets` by `workers` Luigi workers (on `scheduler_url`, or a scheduler of their own); the summary of
    the worker that scheduled them. `factory`: the worker and scheduler factory luigi.build takes (its workers
    must honour `keep_alive_while`); `options`: luigi.build's others.

    Several, without a central scheduler: one worker process schedules the targets (one add_task per task of
    the graph) and runs tasks; the others are Luigi's assistants, which run any task the scheduler hands them
    without adding the graph again, and leave once the scheduling worker has left and they are idle. With a
    central scheduler, Luigi's own worker of `workers` processes (a process per task, forked from this one,
    which has imported its tasks' libraries): on a luigid many machines share, an assistant could be handed
    a task of another machine's run file, which need not exist here. Every process it forks dies with it."""
    global TIED
    TIED, tied = True, TIED
    try:
        return build_tied(targets, workers, scheduler_url, factory, **options)
    finally:
        TIED = tied


def build_tied(targets: list[luigi.Task], workers: int, scheduler_url: str | None, factory, **options) -> str:
    if workers == 1 or scheduler_url:
        where = {"scheduler_url": scheduler_url} if scheduler_url else {"local_scheduler": True}
        return luigi.build(targets, workers=workers, worker_scheduler_factory=factory, detailed_summary=True,
                           **where, **options).summary_text
    ask_often()
    with served_scheduler() as (url, start):
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)  # the scheduling worker's summary
        gone, there = os.pipe()  # its end closes when the scheduling worker ends: the assistants then leave
        # Not daemonic: a task may start processes of its own (the scrape's extraction workers).
        processes = [context.Process(target=work, args=(targets, url, factory, options, sender, (gone,)))]
        processes += [context.Process(target=assist, args=(url, factory, options, gone, (there, sender, receiver)))
                      for _ in range(workers - 1)]
        for process in processes:
            process.start()
        sender.close()
        os.close(gone)
        os.close(there)
        start()
        summary = ""
        try:
            with contextlib.suppress(EOFError):  # a worker that died said nothing
                summary = receiver.recv()
            for process in processes:
                process.join()
        except BaseException:  # Ctrl-C: a worker caught inside Luigi's failure handling would wait on the
            for process in processes:  # scheduler, gone with this process, for minutes; their own children die
                process.terminate()  # with them (die_with_parent)
            for process in processes:
                process.join()
            raise
    return summary


def ask_often() -> None:
    """An idle worker asks its own scheduler for work every 0.1 s (Luigi waits 1 to 6 s, to spare a luigid many
    machines share), unless the user's luigi.cfg says otherwise: a task whose input another worker is finishing
    starts when it is done."""
    config = luigi.configuration.get_config()
    for option, value in (("wait_interval", "0.1"), ("wait_jitter", "0.0")):
        if not config.has_option("worker", option):
            config.set("worker", option, value)


def leaves_quietly_on_ctrl_c(target):
    """A forked worker's target that ends without a traceback on Ctrl-C: the terminal sends SIGINT to every
    process of its group, and the parent process says what an interruption leaves."""
    @functools.wraps(target)
    def run(*args) -> None:
        try:
            target(*args)
        except KeyboardInterrupt:
            sys.exit(130)

    return run


@leaves_quietly_on_ctrl_c
def work(targets: list[luigi.Task], url: str, factory, options: dict, sender, closing: tuple) -> None:
    """The scheduling worker: a Luigi worker on the scheduler at `url` until the targets are done or nothing
    more can run; its summary goes back through `sender`. `closing`: what of its parent's it must not hold."""
    for fd in closing:
        os.close(fd)
    result = luigi.build(targets, workers=1, scheduler_url=url, worker_scheduler_factory=factory,
                         detailed_summary=True, **options)
    sender.send(result.summary_text)
    sender.close()


@leaves_quietly_on_ctrl_c
def assist(url: str, factory, options: dict, gone: int, closing: tuple) -> None:
    """An assistant worker: runs what the scheduler at `url` hands it until the scheduling worker has ended
    (its pipe `gone` reads end of file) and it has nothing to run."""
    import logging
    import select

    for end in closing:  # the write end of `gone` (a descriptor) and the summary pipe's ends (connections)
        if isinstance(end, int):
            os.close(end)
        else:
            end.close()
    logging.getLogger("luigi-interface").setLevel(options.get("log_level", "WARNING"))
    worker = factory.create_worker(scheduler=factory.create_remote_scheduler(url), worker_processes=1, assistant=True)
    worker.keep_alive_while = lambda: not select.select([gone], [], [], 0)[0]
    with worker:
        worker.run()
