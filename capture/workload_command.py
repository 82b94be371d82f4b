"""The COMMAND of `kmemscope record ... -- COMMAND`: run while the trace records, and reaped
with wait4 so that what it used is kept (its rusage: user and system CPU time, largest
resident set, page faults, its own and that of the children it waited for, as time(1)
reports). A posting's "System time" of a workload is this, not the host's /proc/stat.

Popen's own poll() and send_signal() would reap the child with waitpid and lose the
rusage: Command never calls them, and records the exit status on the Popen itself so that
Popen never waits for it either.
"""
import os
import signal
import subprocess
import time

WAIT_POLL_S = 0.05


class Command:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv)
        self.usage = None                # resource.struct_rusage once reaped

    @property
    def returncode(self):
        """As Popen's: the exit status, -N for signal N, None while it runs."""
        return self.proc.returncode

    def poll(self):
        if self.proc.returncode is None:
            self._reap(os.WNOHANG)
        return self.proc.returncode

    def wait(self, timeout=None):
        if timeout is None:
            while self.proc.returncode is None:
                self._reap(0)
            return self.proc.returncode
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
            time.sleep(WAIT_POLL_S)
        return self.proc.returncode

    def terminate(self):
        self._signal(signal.SIGTERM)

    def kill(self):
        self._signal(signal.SIGKILL)

    def _signal(self, signum):
        if self.proc.returncode is None:      # not reaped: its pid is still its own
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def _reap(self, flags):
        try:
            pid, status, usage = os.wait4(self.proc.pid, flags)
        except ChildProcessError:             # reaped elsewhere: no status, no usage
            if self.proc.returncode is None:
                self.proc.returncode = 255     # its status is lost: not 0, and no signal
            return
        except InterruptedError:
            return
        if pid == 0:
            return
        self.usage = usage
        self.proc.returncode = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                                else os.WEXITSTATUS(status))

    def rusage(self):
        """The manifest's record of what the command used, or None when it was not reaped
        here."""
        u = self.usage
        if u is None:
            return None
        return {"user_s": round(u.ru_utime, 6), "system_s": round(u.ru_stime, 6),
                "max_rss_kb": u.ru_maxrss, "major_faults": u.ru_majflt,
                "minor_faults": u.ru_minflt}
