"""One tick against the arbiter's memory: what each reading says, in signals and sentences.

Each reading is compared only with the last reading of its own identity:

| kind | no earlier reading | it replaces another identity | fell | rose >= the minimum | else |
|---|---|---|---|---|---|
| proc | baseline* | reset, restarted* | reset, restarted* | positive | flat |
| session | baseline | reset | reset | positive if no proc reading | nothing |
| progress | baseline* | reset, restarted*, ** | reset, restarted* | positive | quiet |

* unseen as well when the reading holds CPU (or shards done). ** a new stage of the same
attempt is progress instead: positive.

"Unseen" means the reading may hide progress made where no delta could see it (a restarted
process that already burned CPU), so the tick cannot count as no progress. "Restarted" means
the process (or the attempt) the no-progress streak was counted on is gone: a reused pid whose
new process has not burned a clock tick yet is a new process all the same, and the streak
starts over with it rather than pass to it. The session total never counts as no progress,
and its answering is no quiet sign either: each exec may see a different set of processes, so
a flat or fallen total says nothing about the job (the false stall this arbiter exists to
prevent). Per-process counters, when present, outrank it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from keeper.domain.watch.liveness_models import (
    SOURCE_OF,
    CounterIdentity,
    CounterKind,
    CounterReading,
    LivenessPolicy,
    Remembered,
    Source,
    Tick,
)

K = CounterKind
Key = tuple[str, str, int, int, int, str]


@dataclass
class Reading:
    """What one tick's counters said, against the memory."""

    positive: list[str] = field(default_factory=list)  # sentences of progress seen
    advanced: set[Key] = field(default_factory=set)  # the processes whose CPU rose
    # (identity, cumulative value) of each process compared flat.
    flat: list[tuple[CounterIdentity, float]] = field(default_factory=list)
    unseen: bool = False  # a reset or first reading that may hide progress
    # A process or attempt was replaced (a reused pid, a retry, another host) or its counter
    # fell: the streak counted on the old one is not the new one's.
    restarted: bool = False
    identity_changed: bool = False  # some reading replaced an earlier identity
    ambiguous: bool = False  # two readings under one identity: neither is used
    proc_seen: bool = False
    session_rose: list[str] = field(default_factory=list)
    quiet_marks: list[str] = field(default_factory=list)  # sources that answered, quietly
    notes: list[str] = field(default_factory=list)  # resets, baselines, flat readings


def number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.1f}"
    return f"{value:.2f}"


def seconds(value: float) -> str:
    if value < 120:
        return f"{value:,.0f} s"
    if value < 7200:
        return f"{value / 60:,.0f} min"
    return f"{value / 3600:,.1f} h"


def name(identity: CounterIdentity) -> str:
    attempt = "" if identity.attempt is None else f" (attempt {identity.attempt})"
    host = f" on {identity.host}" if identity.host else ""
    if identity.kind is K.PROC:
        return f"pid {identity.pid}{host}{attempt}"
    if identity.kind is K.SESSION:
        scope = f" [{identity.scope}]" if identity.scope else ""
        return f"session CPU{host}{scope}"
    return f"progress of {identity.scope or 'the pipeline'}{host}{attempt}"


def _related(identity: CounterIdentity, memory: dict[Key, Remembered]) -> CounterIdentity | None:
    """An earlier identity this reading replaces (PID reuse, a retry, a new stage)."""
    for old in memory.values():
        o = old.identity
        same_host = o.kind is identity.kind and o.host == identity.host
        # A process replaces another only under its pid; a session or a stage, any.
        if same_host and (identity.kind is not K.PROC or o.pid == identity.pid):
            return o
    return None


def _change(old: CounterIdentity, new: CounterIdentity) -> str:
    if new.kind is K.PROC and old.start_time != new.start_time:
        return f"pid {new.pid} was reused (start time {old.start_time} -> {new.start_time})"
    if new.kind is K.SESSION:
        return f"the session scope changed ({old.scope or '-'} -> {new.scope or '-'})"
    return f"{name(new)} replaces attempt {old.attempt}"


def distinct(tick: Tick) -> tuple[list[CounterReading], list[str]]:
    """The tick's readings less any identity read twice (ambiguous: neither is used)."""
    keys = [c.identity.key for c in tick.counters]
    if len(set(keys)) == len(keys):
        return list(tick.counters), []
    counts = Counter(keys)
    notes = [
        f"{counts[k]} readings under one identity {k}: ignored"
        for k in sorted(k for k, n in counts.items() if n > 1)
    ]
    return [c for c in tick.counters if counts[c.identity.key] == 1], notes


def read(
    tick: Tick, memory: dict[Key, Remembered], policy: LivenessPolicy
) -> tuple[Reading, list[CounterReading]]:
    """The signals of `tick`'s counters, and the readings to remember (duplicates dropped)."""
    out = Reading()
    kept, out.notes = distinct(tick)
    out.ambiguous = len(kept) < len(tick.counters)
    for reading in kept:
        _one(reading, memory.get(reading.identity.key), memory, policy, tick.at, out)
    if any(r.identity.kind is K.PROC for r in tick.counters):
        out.proc_seen = True
    elif Source.PROC in tick.sources:
        out.quiet_marks.append("the process listing shows no process of the job")
    if out.session_rose and not out.proc_seen:
        out.positive.extend(out.session_rose)
    elif out.session_rose:
        out.notes.extend(f"{s} (outranked by the per-process counters)" for s in out.session_rose)
    return out, kept


def _one(
    reading: CounterReading,
    prev: Remembered | None,
    memory: dict[Key, Remembered],
    policy: LivenessPolicy,
    at: float,
    out: Reading,
) -> None:
    identity, value = reading.identity, reading.value
    kind, who = identity.kind, name(identity)
    threshold = policy.min_cpu_seconds if kind is not K.PROGRESS else 1.0
    # The session total answering is no quiet sign: its scope drifts, so it cannot say that
    # nothing happens (it only ever shows life, and only when no process was read).
    # A reading with nothing to compare with may hide progress made where no delta could see.
    unseen = kind is not K.SESSION and value >= threshold

    def reset(why: str) -> None:
        out.notes.append(f"{why}: a reset, no signal")
        out.identity_changed = True
        out.restarted = out.restarted or kind is not K.SESSION
        out.unseen = out.unseen or unseen

    if prev is None:
        old = _related(identity, memory)
        if kind is K.PROGRESS and old is not None and old.attempt == identity.attempt:
            out.positive.append(f"the stage changed: {name(old)} -> {who}")
        elif old is not None:
            reset(_change(old, identity))
        elif kind is not K.SESSION:
            out.notes.append(f"{who} first read at {number(value)}: a baseline, no signal")
            out.unseen = out.unseen or unseen
        return
    delta, dt = value - prev.value, at - prev.at
    if delta < 0:
        reset(f"{who} fell from {number(prev.value)} to {number(value)}")
        return
    if kind is K.PROC:
        if delta >= threshold:
            out.advanced.add(identity.key)
            out.positive.append(
                f"{who} advanced {number(delta)} core-s in {seconds(dt)}"
                f" ({number(100 * delta / dt)}% CPU)"
            )
        else:
            out.flat.append((identity, value))
            out.notes.append(f"{who} flat at {number(value)} core-s for {seconds(dt)}")
    elif kind is K.SESSION:
        if delta >= threshold:
            out.session_rose.append(f"{who} rose {number(delta)} core-s in {seconds(dt)}")
        else:
            out.notes.append(f"{who} unchanged at {number(value)}: its scope is not trusted")
    elif delta >= threshold:
        out.positive.append(f"{who} advanced {number(prev.value)} -> {number(value)} shards")
    else:
        out.quiet_marks.append(f"{who} flat at {number(value)} shards")


def remember(
    old: tuple[Remembered, ...],
    tick: Tick,
    kept: list[CounterReading],
    policy: LivenessPolicy,
    carry: bool,
    advanced: set[Key] | None = None,
) -> tuple[Remembered, ...]:
    """The memory after `tick`: each kind that answered replaced by its readings; a kind that
    did not answer keeps its earlier readings when `carry` (a delta may span an unavailable
    tick, never an observer gap). At most policy.max_remembered, the largest kept."""
    answered = {k for k in K if SOURCE_OF[k] in tick.sources}
    before = {r.identity.key: r.advanced_at for r in old} if carry else {}
    advanced = advanced or set()
    new = [
        Remembered(
            identity=r.identity,
            value=r.value,
            at=tick.at,
            advanced_at=tick.at if r.identity.key in advanced else before.get(r.identity.key),
        )
        for r in kept
    ]
    if carry:
        new.extend(r for r in old if r.identity.kind not in answered)
    if len(new) > policy.max_remembered:
        new.sort(key=lambda r: (-r.value, r.identity.key))
        new = new[: policy.max_remembered]
    return tuple(new)
