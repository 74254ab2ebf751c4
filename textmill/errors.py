"""The one exception type a user sees as a single error line (see cli.main), and the disk errors and
network failures that are reported the same way."""

import errno


class TextmillError(Exception):
    """Bad input or configuration: reported as one line on stderr with exit status 2, no traceback. It would
    fail the same way again, so the workflow does not retry it."""

    exit_status = 2


class RunFailed(TextmillError):
    """Work that failed while it ran for a reason a retry may cure (a process that died): one line, exit
    status 1."""

    exit_status = 1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in a command that knows what it leaves behind: its message says so (the corpus stages' default:
    finished shards are kept)."""


class NothingKept(TextmillError):
    """A command that ran to its end and kept nothing (every record rejected, or none to read): its summary
    and output stand, and its exit status, 1, tells a script it has nothing to go on with."""

    exit_status = 1


# What the disk answers when it is full or not ours to write: the user's to fix, not a fault of textmill.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def is_disk_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_ERRORS


# What clients of a store (botocore, aiohttp under s3fs/gcsfs) raise when the server does not answer; some
# are not OSErrors, so they are known by name, anywhere in the chain of causes.
UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ClientConnectorError",
               "ServerDisconnectedError"}


def network_failure(exc: BaseException) -> BaseException | None:
    """The exception in `exc`'s chain of causes that says a server (an object store, a central scheduler) could
    not be reached or hung up; None if there is none."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in UNREACHABLE or isinstance(exc, (ConnectionError, TimeoutError)):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None
