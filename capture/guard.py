"""A small process that puts the tracing state back when a flight recorder is killed.

A flight recorder leaves the kernel tracing between triggers (no trace-cmd
runs then: the ring buffer fills and overwrites itself). If the recorder dies
without running its own clean-up (SIGKILL, the OOM killer), the guard, forked
before anything changed, sees the end of a pipe close without the word that
all went well, takes the record lock and restores the saved state, as
`record --cleanup` would. It ignores the terminal's signals (its own session)
so that Ctrl-C reaches only the recorder. A guard killed too leaves the state
file for `record --cleanup` or the next record.
"""
import os
import signal
import sys
import time

from kmemscope.capture import cleanup, lock

DONE = b"done"


class Guard:
    def __init__(self, pid, fd):
        self.pid, self.fd = pid, fd

    @classmethod
    def start(cls, state_dir, close_fds=()):
        """Fork the guard (call before taking the lock and before starting threads; a guard
        forked later, in place of one that died, closes `close_fds`, the record lock's
        among them: it must take the lock anew once the recorder is gone)."""
        sys.stdout.flush()
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the guard
            code = 0
            try:
                os.close(write_end)
                for fd in close_fds:
                    os.close(fd)
                os.setsid()
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1,
                               signal.SIGPIPE):
                    signal.signal(signum, signal.SIG_IGN)
                _watch(read_end, state_dir, os.getppid())
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(read_end)
        os.set_inheritable(write_end, False)
        return cls(pid, write_end)

    def done(self):
        """Tell the guard that the recorder cleaned up itself; wait for it to go."""
        if self.fd is None:
            return
        try:
            os.write(self.fd, DONE)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _say(text):
    try:
        print("kmemscope record (guard): " + text, file=sys.stderr, flush=True)
    except OSError:
        pass


def _watch(fd, state_dir, recorder_pid):
    got = b""
    while True:
        chunk = os.read(fd, 16)
        if not chunk:
            break
        got += chunk
    if got == DONE:
        return
    # The recorder died without saying so: wait for its lock, then restore.
    held, deadline = None, time.monotonic() + 120
    while held is None and time.monotonic() < deadline:
        try:
            held = lock.RecordLock(state_dir).acquire()
        except Exception:
            time.sleep(0.2)
    if held is None:
        _say("could not take the record lock; run `kmemscope record --cleanup`")
        return
    try:
        path = cleanup.state_path(state_dir)
        if os.path.exists(path):
            _say("the flight recorder (pid %d) died; restoring the tracing state" % recorder_pid)
            cleanup.recover(state_dir, _say)
    finally:
        held.release()
