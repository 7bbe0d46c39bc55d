"""The commands keeper runs in a task's container through ExecInContainer, and pure parsers
of what they print.

PROC_STAT_COMMAND prints a line `keeper-exec-pid <the shell's pid>`, then one
`/proc/<pid>/stat` line per process the container sees:

    pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss ...

utime (field 14), stime (15) and starttime (22) are in clock ticks (CLK_TCK per second).
comm may hold spaces and parentheses, so a line splits at its LAST ')'. A process that
exits while `cat` reads leaves a short or empty line: it is skipped, not an error. The
exec's own shell is among the processes listed (`cat` is not: the shell expands the glob
before it starts `cat`, or execs `cat` in its own place); the parser drops the line of the
shell's pid, since it is new at every read and says nothing of the task.

SESSION_CPU_COMMAND prints one number, the core-seconds of the processes the exec's session
sees. Its scope is not stable across reads (it can go down), so it is a hint only.

COORDINATOR_CPU_COMMAND runs the two in one exec, as a check reads its coordinator: the
shell's pid and the stat lines, a line `keeper-stat-exit <cat's exit status>`, then the
session's number. A check makes one call fewer; what each part says is what its own command
would have said.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

EXEC_PID = "keeper-exec-pid"
PROC_STAT_COMMAND = ["sh", "-c", f'echo "{EXEC_PID} $$"; cat /proc/[0-9]*/stat 2>/dev/null']
SESSION_CPU_COMMAND = ["sh", "-c", "ps -e -o cputimes= | awk '{s+=$1} END {print s+0}'"]
CLK_TCK = 100
STAT_EXIT = "keeper-stat-exit"
COORDINATOR_CPU_COMMAND = [
    "sh",
    "-c",
    f'{PROC_STAT_COMMAND[2]}; echo "{STAT_EXIT} $?"; {SESSION_CPU_COMMAND[2]}',
]

# Positions in the fields after the ')' (the first of them, state, is field 3).
_AFTER_COMM = 3
_UTIME = 14 - _AFTER_COMM
_STIME = 15 - _AFTER_COMM
_STARTTIME = 22 - _AFTER_COMM


class ProcStat(BaseModel):
    """One process from /proc/<pid>/stat: its CPU ticks and when it started."""

    model_config = ConfigDict(frozen=True)

    pid: int
    comm: str
    state: str
    utime: int
    stime: int
    starttime: int

    @property
    def cpu_ticks(self) -> int:
        return self.utime + self.stime

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_ticks / CLK_TCK


def parse_proc_stat_line(line: str) -> ProcStat | None:
    """One stat line, or None when it is not a whole one."""
    open_at = line.find("(")
    close_at = line.rfind(")")
    if open_at <= 0 or close_at < open_at:
        return None
    head = line[:open_at].strip()
    rest = line[close_at + 1 :].split()
    if not head.isdigit() or len(rest) <= _STARTTIME:
        return None
    numbers = (rest[_UTIME], rest[_STIME], rest[_STARTTIME])
    if not all(value.isdigit() for value in numbers):
        return None
    utime, stime, starttime = (int(value) for value in numbers)
    return ProcStat(
        pid=int(head),
        comm=line[open_at + 1 : close_at],
        state=rest[0],
        utime=utime,
        stime=stime,
        starttime=starttime,
    )


def _exec_pid(line: str) -> int | None:
    words = line.split()
    if len(words) == 2 and words[0] == EXEC_PID and words[1].isdigit():
        return int(words[1])
    return None


def parse_proc_stat(stdout: str) -> list[ProcStat]:
    """Every whole stat line of PROC_STAT_COMMAND's output, in order, less the exec's own
    shell. Output without the shell's pid line is read whole."""
    found: list[ProcStat] = []
    shell: int | None = None
    for line in stdout.splitlines():
        stat = parse_proc_stat_line(line)
        if stat is not None:
            found.append(stat)
        elif shell is None:
            shell = _exec_pid(line)
    if shell is None:
        return found
    return [stat for stat in found if stat.pid != shell]


def proc_stat_answer(stdout: str, exit_code: int) -> str | None:
    """PROC_STAT_COMMAND's output, or None when it gave no answer: `cat` failed and printed
    nothing past the shell's pid line. `cat` also exits 1 when a process vanished between the
    glob and the read; what it did print is still good."""
    if exit_code == 0:
        return stdout
    printed = [line for line in stdout.splitlines() if line and _exec_pid(line) is None]
    return stdout if printed else None


def parse_session_cpu(stdout: str) -> float | None:
    """SESSION_CPU_COMMAND's core-seconds, or None when it printed no finite, non-negative
    number."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = float(lines[-1])
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def split_coordinator_cpu(stdout: str) -> tuple[str | None, str | None]:
    """COORDINATOR_CPU_COMMAND's stdout as what PROC_STAT_COMMAND and SESSION_CPU_COMMAND
    would have printed. The stat part is None when it gave no answer (`proc_stat_answer`);
    both are None when the exit line is missing (the shell did not get that far). No stat
    output reads as the exit line: a stat line starts with a pid, and a comm that holds a
    newline is at most 15 bytes, shorter than STAT_EXIT."""
    lines = stdout.splitlines(keepends=True)
    for at, line in enumerate(lines):
        words = line.split()
        if len(words) == 2 and words[0] == STAT_EXIT and words[1].isdigit():
            stat = proc_stat_answer("".join(lines[:at]), int(words[1]))
            return stat, "".join(lines[at + 1 :])
    return None, None
