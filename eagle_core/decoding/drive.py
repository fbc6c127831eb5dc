"""The one road through the engine: every caller runs a generation to its end with `drive`.

A generation is anything with `.done` and `.step()`: an EagleDecoder, a Replay, a PayoffRun, a Race's lanes, a
benchmark's class of decoders stepped together. What differs between callers is only *where* a cycle runs, the
`turn`:

  alone                  the cycle right here (the CLI, the benchmark, scripts, tests, a ZeroGPU worker)
  serving.rounds         the engine loop's next round, beside every other student's cycle (cycle_turn)
  serving.turns          a model turn of its own (a Replay, a job of the loop: "How can I"'s payoff)

so the loop itself, when it stops (done, a Stop, a turn that gives nothing back) and what a caller sees after each
cycle, is written once, here. A rule about what a cycle may draft is the turn's (serving/rounds.py sizes trees only
when the teacher says so); a caller cannot step around it.

A turn is a generator `turn(gen, waiting, cancel)`: it may yield notes while it waits (`waiting(ahead, seconds)`'s
values) and returns the cycle's records (a non-empty list), or CANCELLED / [] when nothing ran.
"""
from __future__ import annotations

CANCELLED = object()   # a turn's answer when `cancel` was set while it waited (its queue place given up)
FINISHED, STOPPED = "finished", "stopped"


def alone(gen, waiting=None, cancel=None):
    """The turn of a generation that has the model to itself: one cycle, here and now."""
    return [gen.step()]
    yield  # noqa: unreachable: makes this a generator, so drive treats every turn alike


def drive(gen, turn=alone, waiting=None, cancel=None, each=None):
    """Generator: `gen`'s cycles until it is done, each one `turn(gen, waiting, cancel)`.

    Yields what the turn yields while it waits, and after each cycle `each(records)` when that is not None (a
    caller's record, progress or page update). Returns FINISHED, or STOPPED when `cancel` (a threading.Event) was
    set before a cycle or while its turn waited, or the turn ran nothing (the generation was freed meanwhile)."""
    while not gen.done:
        if cancel is not None and cancel.is_set():
            return STOPPED
        got = yield from turn(gen, waiting, cancel)
        if got is CANCELLED or not got:
            return FINISHED if gen.done else STOPPED
        if each is not None:
            out = each(got)
            if out is not None:
                yield out
    return FINISHED


def cycles(gen):
    """Each cycle's record, alone, for a caller that reads them as they come (`for rec in cycles(dec)`)."""
    return drive(gen, each=lambda got: got[-1])


def finish(gen):
    """Run `gen` alone to its end; returns it (an EagleDecoder's records are its `.cycles`)."""
    for _ in drive(gen):
        pass
    return gen


def outcome(steps) -> object:
    """Exhaust a generator that yields nothing a caller needs (drive with a blocking turn) and return its value."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value
