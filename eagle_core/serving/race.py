"""The Race on the shared model: plain decoding and EAGLE of the same prompt, advanced in turns so a class watches
both grow at once.

Fairness is by model time, not by turn count. Both decoders share the one model; before every cycle the one that
has used *less engine time so far* goes next (a tie goes to plain decoding), so at every moment the two have had
the same model time to within one cycle, and the tokens each has on screen are what it makes of an equal share.
(Alternating turn for turn would hand EAGLE a longer share: its cycle is a draft plus a pass over the whole tree,
a plain cycle one pass over one token.) When one finishes, the other has the model to itself.

Each cycle is one model turn (serving/turns.py): other sessions' Steps and Runs interleave with a Race exactly as
with a Run, and the engine's timings, which the schedule and the speeds read, never include waiting for a turn.
Under ZeroGPU / EAGLE_LENS_PRECOMPUTE each generation is decoded in one go first; the Race then reveals both with
the same schedule, each cycle after its own engine time, as if they shared the model.
"""
from __future__ import annotations

import dataclasses
import time

from ..bench.metrics import cycle_seconds
from ..decoding.drive import STOPPED, drive
from .generation import as_dicts, new_decoder, precomputed, slim, trim_history
from .gpu import PRECOMPUTE, ZERO_GPU
from .loading import MODEL
from .rounds import cycle_turn
from .turns import CANCELLED, model_turn

PLAIN, EAGLE = "plain", "EAGLE"


@dataclasses.dataclass
class Lane:
    """One decoder of the Race: a live decoder, or the records of a generation decoded in one go (revealed at
    the engine's pace); what it has shown so far, its engine time, and when (wall clock) its last cycle came."""
    name: str
    decoder: object = None            # EagleDecoder (live), or None with `pending`
    pending: list | None = None       # recorded cycles still to reveal (precomputed)
    records: list = dataclasses.field(default_factory=list)   # record dicts shown so far (slim: no tree)
    seconds: float = 0.0              # engine time of those records (model time only)
    elapsed: float = 0.0              # wall seconds from the Race's start to this lane's latest cycle
    stopped: bool = False             # Stop came before it finished
    target: object = None             # names the tokens of lean records (default: the live decoder's target)

    @property
    def live(self) -> bool:
        return self.pending is None

    @property
    def done(self) -> bool:
        if self.live:
            return self.decoder is None or self.decoder.done
        return not self.pending

    @property
    def finished(self) -> str | None:
        """Why it ended ("max_new_tokens", "eos", "context"), None while it runs or when it was stopped."""
        return self.records[-1].get("finished") if self.records and self.done else None

    def step(self) -> dict:
        """One cycle (the caller holds the model's turn for a live lane)."""
        if self.live:
            rec = as_dicts([self.decoder.step()])[0]
            trim_history(self.decoder.cycles)      # the decoder keeps the whole of its last cycles only
            return rec
        rec = self.pending.pop(0)
        time.sleep(cycle_seconds(rec))     # the engine took this long for it when it was decoded
        return rec

    def named(self, rec: dict) -> dict:
        """The record with its committed tokens' bytes: lean records (record_topk = 0) carry none, and the
        lane's text is decoded from them (after the turn: the engine's timings never include this)."""
        target = self.target or getattr(self.decoder, "target", None)
        if len(rec.get("new_token_bytes") or []) == len(rec["new_tokens"]) or target is None:
            return rec
        return dict(rec, new_token_bytes=[target.token_bytes(t).hex() for t in rec["new_tokens"]])

    def tokens(self) -> list[int]:
        return [t for r in self.records for t in r["new_tokens"]]


def next_lane(lanes: list[Lane]) -> Lane | None:
    """The lane that goes next: of those not done, the one with the least engine time (ties: the first)."""
    going = [ln for ln in lanes if not ln.done]
    return min(going, key=lambda ln: ln.seconds) if going else None


def live_lanes(cfg, shift: str, prompt: str) -> list[Lane]:
    """Plain decoding (draft='vanilla', the same engine) and EAGLE with `cfg`, as live decoders."""
    return [Lane(PLAIN, decoder=new_decoder(dataclasses.replace(cfg, draft="vanilla"), shift, prompt)),
            Lane(EAGLE, decoder=new_decoder(cfg, shift, prompt))]


def recorded_lanes(cfg, shift: str, prompt: str, cancel=None) -> list[Lane]:
    """Both generations decoded in one go each (ZeroGPU: one GPU call each), to be revealed in turns; Stop
    (`cancel`) ends the decoding between cycles (Stopped)."""
    target, _ = MODEL.require()
    return [Lane(PLAIN, pending=list(precomputed(dataclasses.replace(cfg, draft="vanilla"), shift, prompt, cancel)),
                 target=target),
            Lane(EAGLE, pending=list(precomputed(cfg, shift, prompt, cancel)), target=target)]


def make_lanes(cfg, shift: str, prompt: str, cancel=None) -> list[Lane]:
    if ZERO_GPU or PRECOMPUTE:
        return recorded_lanes(cfg, shift, prompt, cancel)
    return live_lanes(cfg, shift, prompt)


class Race:
    """The lanes as one generation to drive: done when every lane is."""

    def __init__(self, lanes: list[Lane]):
        self.lanes = lanes

    @property
    def done(self) -> bool:
        return next_lane(self.lanes) is None


def lane_turn(race: Race, waiting=None, cancel=None):
    """The turn of the lane that goes next (next_lane): a live lane's cycle in the engine loop's next round, beside
    the other students' cycles; a recorded lane's in a model turn of its own. Returns [(lane, record)]."""
    lane = next_lane(race.lanes)
    if lane.live:
        got = yield from cycle_turn(lane.decoder, waiting, cancel=cancel)
        if got is CANCELLED or not got:
            return got
        rec = got[0]
        trim_history(lane.decoder.cycles)
    else:
        ticket = yield from model_turn(waiting, needs_lock=False, cancel=cancel)
        if ticket is CANCELLED:
            return CANCELLED
        rec = lane.step()
    return [(lane, rec)]


def race_in_turns(lanes: list[Lane], waiting=None, cancel=None):
    """Generator: advance the lanes cycle by cycle, the one with less engine time first, each cycle in its own
    model turn. Yields `waiting(ahead, seconds)` while queued for a turn and the Lane that just moved after each
    cycle (the caller decides what to draw, and how often); returns "finished", or "stopped" when `cancel` (a
    threading.Event) was set: then within one cycle, or at once while it waits for a turn."""
    t0 = time.perf_counter()

    def moved(got):
        lane, rec = got[0]
        rec = slim(lane.named(rec))          # the board reads the text and counters only: no tree is kept
        lane.records.append(rec)
        lane.seconds += cycle_seconds(rec)
        now = time.perf_counter() - t0
        for ln in lanes:                   # a lane's clock stops at its last cycle
            if ln is lane or not ln.done:
                ln.elapsed = now
        return lane

    ended = yield from drive(Race(lanes), lane_turn, waiting, cancel, each=moved)
    if ended == STOPPED:
        for ln in lanes:
            ln.stopped = not ln.done
    return ended
