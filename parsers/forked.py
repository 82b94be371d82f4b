"""A function run in a forked child process, whose messages the parent reads over a pipe.

The parse decodes in such a child (parsers/ingest.py), so that a crash of the C libraries
on a corrupt trace costs the child, not the command. multiprocessing does the same, but
importing it and starting its Process takes 12-18 ms of every parse on this project's
machines; this is the part kmemscope uses: fork, a one-way pipe of pickled messages, the
child's exit status, kill and reap.

The messages are pickles from a child forked from this process; it runs kmemscope's own
code (on hostile input, like the parent), as multiprocessing's children do.
"""
import os
import pickle
import signal
import struct
import sys

_LENGTH = struct.Struct("<Q")


class Sender:
    """The child's end: send(obj) writes one message."""

    def __init__(self, fd):
        self.fd = fd

    def send(self, obj):
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_LENGTH.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class ForkedChild:
    """target(sender, *args) in a forked child; its exit status is 0 when target returns,
    1 when it raises (the traceback goes to the child's stderr)."""

    def __init__(self, target, args=()):
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:                            # the child never returns from here
            code = 1
            try:
                os.close(read_end)
                _stdin_from_devnull()
                target(Sender(write_end), *args)
                code = 0
            except BaseException:               # noqa: B902 (exit status 1, as said)
                try:
                    import traceback

                    traceback.print_exc()
                except BaseException:           # noqa: B902
                    pass
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(write_end)
        self.pid = pid
        self.exitcode = None
        self._reader = os.fdopen(read_end, "rb")

    def recv(self):
        """The child's next message; EOFError once it has closed its end (or died)."""
        head = self._reader.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            raise EOFError
        (n,) = _LENGTH.unpack(head)
        data = self._reader.read(n)
        if len(data) < n:
            raise EOFError
        return pickle.loads(data)

    def join(self):
        """Wait for the child's exit; exitcode: its status, or -N when signal N ended it."""
        if self.exitcode is None:
            while True:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    break
                except InterruptedError:
                    continue
            self.exitcode = os.waitstatus_to_exitcode(status)
            self._reader.close()
        return self.exitcode

    def kill(self):
        if self.exitcode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _stdin_from_devnull():
    """The child reads nothing from the terminal: its stdin is /dev/null."""
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
