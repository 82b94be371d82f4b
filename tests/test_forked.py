"""parsers/forked.py: the parse's decoder child without multiprocessing. Messages arrive whole
and in order (one larger than a pipe's buffer), a raising target exits 1 with its traceback on
the child's stderr, a killed child reads as EOF and a negative exit code, and join reaps it."""
import os
import signal
import time

from kmemscope.parsers.forked import ForkedChild


def _talk(sender, n):
    sender.send(("progress", 1))
    sender.send(("ok", "x" * n))
    sender.close()


def _fail(sender):
    raise ValueError("broken on purpose")


def _hang(sender):
    sender.send(("started", os.getpid()))
    time.sleep(60)


def test_messages_arrive_whole_and_in_order():
    child = ForkedChild(_talk, (1 << 20,))
    assert child.recv() == ("progress", 1)
    kind, payload = child.recv()
    assert kind == "ok" and len(payload) == 1 << 20
    try:
        child.recv()
        raise AssertionError("no EOF after the child closed its end")
    except EOFError:
        pass
    assert child.join() == 0 and child.exitcode == 0


def test_a_raising_target_exits_1(capfd):
    child = ForkedChild(_fail)
    try:
        child.recv()
        raise AssertionError("a message from a failing child")
    except EOFError:
        pass
    assert child.join() == 1
    assert "ValueError: broken on purpose" in capfd.readouterr().err


def test_a_killed_child_reads_as_eof_and_its_signal():
    child = ForkedChild(_hang)
    kind, pid = child.recv()
    assert kind == "started" and pid == child.pid != os.getpid()
    child.kill()
    try:
        child.recv()
        raise AssertionError("a message after the kill")
    except EOFError:
        pass
    assert child.join() == -signal.SIGKILL
    child.kill()                # reaped already: nothing to signal, no error
    try:
        os.kill(pid, 0)
        raise AssertionError("the child was not reaped")
    except ProcessLookupError:
        pass
