"""The processes inside each task's container, and the CPU counters keeper reads.

utime+stime advance at the task's current core rate x CLK_TCK per second of wall time, so
a probe's two reads a few real seconds apart measure the truth whatever the scenario speed.
A process is created the first time its task attempt is seen running; its start time is
fixed then. Every attempt's main process is pid 7, so a new attempt on the same worker
reuses the pid with a new start time (identity is host, pid, start time, attempt).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from keeper.wire.iris.exec_commands import CLK_TCK, EXEC_PID

MAIN_PID = 7
HELPER_PID = 23
# Fields 23-52 of a stat line after starttime (vsize, rss, ...): values that do not matter.
_TAIL = (
    "18446744073709551615 94212345678848 94212345712345 140731234567890 0 0 0 0 16781312 "
    "17642 0 0 0 17 3 0 0 0 0 0 94212345812345 94212345823456 94212367000000 "
    "140731234571234 140731234571300 140731234571300 140731234574000 0"
)


@dataclass
class Proc:
    pid: int
    comm: str
    start_wall: float
    ticks: float = 0.0
    share: float = 1.0  # of the task's cores
    running: bool = False

    def stat_line(self, boot_wall: float, ppid: int) -> str:
        total = int(self.ticks)
        utime, stime = total - total // 10, total // 10
        start = int((self.start_wall - boot_wall) * CLK_TCK)
        state = "R" if self.running else "S"
        threads = 24 if self.pid == MAIN_PID else 1
        return (
            f"{self.pid} ({self.comm}) {state} {ppid} {self.pid} 1 0 -1 4194560 "
            f"{1200 + total // 50} 0 {12 + total // 5000} 0 {utime} {stime} 0 0 20 0 "
            f"{threads} 0 {start} 2147483648 262144 {_TAIL}"
        )


@dataclass
class Container:
    """One task attempt's processes on its worker host."""

    host: str
    boot_wall: float
    procs: list[Proc] = field(default_factory=list)
    next_pid: int = 100
    last_wall: float = 0.0
    cores: float = 0.0

    def settle(self, wall: float) -> None:
        """Credit the ticks burned since the last settle at the rate that held then."""
        elapsed = max(0.0, wall - self.last_wall)
        for proc in self.procs:
            proc.ticks += self.cores * proc.share * CLK_TCK * elapsed
            proc.running = self.cores * proc.share > 0.05
        self.last_wall = wall

    def set_cores(self, wall: float, cores: float) -> None:
        self.settle(wall)
        self.cores = cores
        for proc in self.procs:
            proc.running = cores * proc.share > 0.05

    def proc_stat(self, wall: float, denied: bool = False) -> str:
        """What PROC_STAT_COMMAND prints: the shell's pid line, then ours and the exec's own
        shell (as a real one shows: `cat` starts after the glob is expanded, so it is never
        listed). When /proc is denied, `cat` prints nothing (its complaints go to /dev/null)
        and only the shell's line is left."""
        self.settle(wall)
        sh = self.next_pid
        self.next_pid += 2
        if denied:
            return f"{EXEC_PID} {sh}\n"
        lines = [f"{EXEC_PID} {sh}"]
        lines += [p.stat_line(self.boot_wall, 0 if p.pid == 1 else 1) for p in self.procs]
        lines.append(Proc(sh, "sh", wall, running=True).stat_line(self.boot_wall, 0))
        return "\n".join(lines) + "\n"

    def total_seconds(self, wall: float) -> float:
        self.settle(wall)
        return sum(p.ticks for p in self.procs) / CLK_TCK


def new_container(
    host: str, boot_wall: float, start_wall: float, cores: float, history_ticks: float = 0.0
) -> Container:
    procs = [
        Proc(1, "tini", start_wall, share=0.0),
        Proc(MAIN_PID, "python3.11", start_wall, ticks=history_ticks * 0.97, share=0.97),
        # A comm with a space and parentheses: readers must split at the last ')'.
        Proc(HELPER_PID, "gcs (io) pool", start_wall + 2.0, ticks=history_ticks * 0.03, share=0.03),
    ]
    return Container(host, boot_wall, procs, last_wall=start_wall, cores=cores)


def session_reading(total: float, reset: bool, rng: random.Random) -> str:
    """SESSION_CPU_COMMAND's stdout: the processes this session sees, in core-seconds.

    With `reset` each read is a fresh session that sees only part of the tree, so the
    number jumps down and up between reads while the true total only grows."""
    seen = total * rng.uniform(0.05, 0.6) if reset else total
    return f"{int(seen)}\n"
