"""A provider process that dies with its worker, set up after exec rather than before it.

The parent-death signal (prctl PR_SET_PDEATHSIG) must be set by the child itself. Setting
it in a preexec_fn makes Python fork() instead of vfork(), and fork() runs the atfork
handlers of every library in the worker: gRPC's, from the TPU client, start threads in the
child that crash it (SIGSEGV, or SIGABRT after "epoll_wait error: Bad file descriptor")
before it reaches exec: up to one provider call in five while gRPC was busy. So the
child is spawned plainly (vfork, no handlers run), and a launcher, the worker's own
interpreter without site or environment, sets the signal, checks that its parent is still
the worker (one that died before the signal was set would leave the provider unowned),
and execs the provider in the same process: same pid, process group, arguments and
environment.

The kernel ties the signal to the thread that spawned the child, not to the process, so
spawn from the event loop's own thread, which lives as long as the worker; never from
asyncio.to_thread or an executor, whose threads come and go.

setpriv --pdeathsig would cost less than an interpreter start, but it execs through
execvp, which runs a file without an interpreter line as a shell script instead of
failing, and it cannot check the parent.
"""

from __future__ import annotations

import os
import sys

# What the launcher prints, and exits with, when the provider cannot be executed at all.
_FAILED_EXIT = 127
_FAILED_MARK = "keeper-launcher: cannot exec: "
_LAUNCHER = f"""
import ctypes, os, sys
ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
if os.getppid() != int(sys.argv[1]):
    os.kill(os.getpid(), 9)
try:
    os.execv(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write({_FAILED_MARK!r} + str(exc.errno) + " " + (exc.strerror or "") + "\\n")
    os._exit({_FAILED_EXIT})
"""


def tied_argv(program: str) -> list[str]:
    """The argv that runs program as a child that dies with this process (Linux only)."""
    if not sys.platform.startswith("linux"):
        return [program]  # no parent-death signal elsewhere; the group kill still applies
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), program]


def launch_error(exit_code: int | None, stderr: str) -> OSError | None:
    """The OSError exec gave, when the launcher could not start the program at all."""
    if exit_code != _FAILED_EXIT or not stderr.startswith(_FAILED_MARK):
        return None
    number, _, text = stderr[len(_FAILED_MARK) :].strip().partition(" ")
    return OSError(int(number) if number.isdigit() else 0, text)
