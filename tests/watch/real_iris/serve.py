"""The real iris controller for the real_iris tests: a LocalCluster of marin-iris.

Run by the real-iris venv's python (`make iris-venv` builds .venv/iris), never by keeper's:

    .venv/iris/bin/python tests/watch/real_iris/serve.py [--workers 2]

It prints the controller's URL (`http://127.0.0.1:PORT`) as one line on stdout once the
controller answers, and runs until SIGTERM or SIGINT, or until the process that started it
dies. The controller, its log server and its workers (threads; each task a local process)
are iris's own. iris writes credentials under $HOME, so HOME is a directory of its own,
removed at the end; the venv's bin directory goes first on PATH, so a worker's ProfileTask
finds the venv's py-spy.

The local workers run each task in this process's working directory, which is this file's
directory: a job names `zephyr_job.py` relative to it. (An absolute path would do on most
machines, but iris's process runtime rewrites any argument under /tmp to a directory of the
task's own, as it mounts /tmp for a container, so a checkout under /tmp would lose it.)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import threading

PR_SET_PDEATHSIG = 1


def die_with_parent(stop: threading.Event) -> None:
    """SIGTERM when the parent dies (Linux), and a watch on the parent for the rest."""
    parent = os.getppid()
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    def watch() -> None:
        while not stop.wait(1.0):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="local iris workers at most")
    opts = parser.parse_args(argv)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    die_with_parent(stop)

    home = tempfile.mkdtemp(prefix="keeper-iris-home-")
    os.environ["HOME"] = home
    bin_dir = os.path.dirname(sys.executable)
    os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    os.chdir(os.path.dirname(os.path.abspath(__file__)))

    from iris.cluster.local_cluster import LocalCluster, make_local_cluster_config

    cluster = LocalCluster(make_local_cluster_config(opts.workers))
    try:
        url = cluster.start()
        print(url, flush=True)
        stop.wait()
    finally:
        cluster.close()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
