"""A session's generation on the shared model: its decoder (live, or a Replay of a generation decoded in one go),
built for a prompt and settings, advanced one cycle per model turn. Records are plain dicts (what the page keeps
in its state and the views draw)."""
from __future__ import annotations

import dataclasses
import itertools
import json
import time

from .errors import Finished, Stopped, UserError
from .gpu import PRECOMPUTE, ZERO_GPU, gpu
from .loading import MODEL
from .sessions import Session
from .rounds import cycle_turn
from ..decoding.drive import STOPPED, cycles, drive, finish, outcome

MAX_PROMPT_CHARS = 4000
# The prompt as the model sees it (chat template included), in tokens: its prefill is one model turn that every
# other session waits behind. 4,000 characters of English are 1,000-1,400 tokens, but other scripts take up to
# 3 tokens a character (CJK, emoji): this caps the prefill itself.
MAX_PROMPT_TOKENS = 1536
# A session keeps the whole of its last KEEP_DETAIL cycles (every node and distribution: the tree, the
# probabilities, the mask, Play); older cycles keep what the text and the statistics read (`slim`). A 512-token
# Run with an 80-node tree would otherwise hold some 170 MB (its records and its decoder's).
KEEP_DETAIL = 16


class Replay:
    """A generation decoded in one go (PRECOMPUTE), revealed cycle by cycle like a live decoder: a cycle no
    sooner than its engine time after the previous one, so a Run streams at the decoder's pace and Stop ends it."""

    replayed = True    # runs nothing on the model: no model turn (serving/rounds.cycle_turn)

    def __init__(self, records: list):
        self.records, self.next, self.shown = records, 0, time.perf_counter()

    @property
    def done(self) -> bool:
        return self.next >= len(self.records)

    def step(self) -> dict:
        rec = self.records[self.next]
        wait = self.shown + sum(rec.get(k) or 0.0 for k in ("draft_seconds", "verify_seconds", "other_seconds")) \
            - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        self.next, self.shown = self.next + 1, time.perf_counter()
        trim_history(self.records, self.next)
        return rec


def check_prompt(prompt) -> str:
    prompt = prompt if isinstance(prompt, str) else ""
    if not prompt.strip():
        raise UserError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise UserError(f"The prompt is {len(prompt)} characters; keep it under {MAX_PROMPT_CHARS}.")
    return prompt


def prompt_ids(target, prompt: str) -> list[int]:
    """The prompt wrapped in the chat template, as token ids; refused over MAX_PROMPT_TOKENS."""
    ids = target.render_prompt(prompt)
    if len(ids) > MAX_PROMPT_TOKENS:
        raise UserError(f"The prompt is {len(ids):,} tokens (with the chat template); the limit is "
                        f"{MAX_PROMPT_TOKENS:,} tokens, so that one prompt's prefill does not hold up everyone "
                        f"else's turn. Shorten it.")
    return ids


def new_decoder(cfg, shift: str, prompt: str):
    """A decoder of the prompt (wrapped in the chat template) with the shifted or unshifted head."""
    from ..decoding.engine import EagleDecoder
    target, heads = MODEL.require()
    return EagleDecoder(target, None if cfg.draft == "vanilla" else heads[shift], cfg, prompt_ids(target, prompt))


# ----------------------------------------------------------------------------- what a session keeps of its cycles
def is_slim(rec) -> bool:
    return bool(rec.get("slim")) if isinstance(rec, dict) else bool(getattr(rec, "slim", False))


def slim(rec):
    """A cycle's record with what the text and the statistics read: the counters, timings and committed tokens,
    and of its tree only the root and the accepted path (without their distributions). A record dict is marked
    `slim` (the page says its tree was not kept); a decoder's CycleRecord keeps its type (and gets a `slim`
    attribute, outside its fields). Never changes `rec`."""
    if is_slim(rec):
        return rec
    if isinstance(rec, dict):
        keep = {0, *rec.get("accepted_path", ())}
        nodes = [dict(n, target_topk=[], draft_topk=[]) for n in rec.get("nodes", ()) if n.get("index") in keep]
        return dict(rec, nodes=nodes, residual_topk=[], slim=True)
    keep = {0, *rec.accepted_path}
    nodes = [dataclasses.replace(n, target_topk=[], draft_topk=[]) for n in rec.nodes if n.index in keep]
    out = dataclasses.replace(rec, nodes=nodes, residual_topk=[])
    try:
        out.slim = True
    except AttributeError:      # a slotted record: slimmed again next time, which changes nothing
        pass
    return out


def bounded(records: list, keep: int | None = None) -> list:
    """The records with all but the last `keep` (KEEP_DETAIL) slimmed (a new list)."""
    keep = KEEP_DETAIL if keep is None else keep
    cut = len(records) - keep
    return [slim(r) if i < cut else r for i, r in enumerate(records)]


def trim_history(cycles: list, upto: int | None = None, keep: int | None = None):
    """Slim, in place, every record of cycles[:upto] (a decoder's own list) but the last `keep`: from the newest
    of them back to the first one already slim (older ones were slimmed before), so each record is slimmed once,
    however many cycles came since the last call."""
    keep = KEEP_DETAIL if keep is None else keep
    for i in range((len(cycles) if upto is None else upto) - keep - 1, -1, -1):
        if is_slim(cycles[i]):
            break
        cycles[i] = slim(cycles[i])


def bound_decoder(dec):
    """Keep a live decoder's own records bounded (call after its cycles, however they were stepped)."""
    if dec is not None and not isinstance(dec, Replay) and isinstance(getattr(dec, "cycles", None), list):
        trim_history(dec.cycles)


def as_dicts(recs) -> list[dict]:
    return [r if isinstance(r, dict) else dataclasses.asdict(r) for r in recs]


@gpu
def decode_all(cfg, shift: str, prompt: str) -> list:
    """A whole generation in one call, timed by the engine (ZeroGPU: one GPU call per generation)."""
    return as_dicts(finish(new_decoder(cfg, shift, prompt)).cycles)


def decode_cycle_by_cycle(cfg, shift: str, prompt: str, cancel=None) -> list:
    """A whole generation, blocking, one cycle per round of the engine loop (serving/rounds.py), so other
    sessions share its passes (EAGLE_LENS_PRECOMPUTE=1 without ZeroGPU, a Race's lanes). Raises Stopped when
    `cancel` (a threading.Event: Stop) is set, at the next round."""
    dec = new_decoder(cfg, shift, prompt)
    if outcome(drive(dec, cycle_turn, cancel=cancel)) == STOPPED:
        raise Stopped("Stopped before the generation was computed.")
    return as_dicts(dec.cycles)


def precomputed(cfg, shift: str, prompt: str, cancel=None) -> list:
    """A whole generation decoded in one go; Stop (`cancel`) ends it between cycles (Stopped), except under
    ZeroGPU, where it is one GPU call."""
    if ZERO_GPU:
        return decode_all(cfg, shift, prompt)
    return decode_cycle_by_cycle(cfg, shift, prompt, cancel)


def advance(dec, n: int = 1) -> list:
    """Up to n cycles of a decoder (live or Replay) as record dicts; [] when there is none or it is done. A live
    decoder keeps the whole of its last KEEP_DETAIL cycles only (trim_history)."""
    if dec is None:
        return []
    out = []
    for rec in itertools.islice(cycles(dec), n):
        out.append(rec)
        bound_decoder(dec)
    return as_dicts(out)


def decode_in_turns(cfg, shift: str, prompt: str, waiting=None, progress=None):
    """Generator: a whole generation, one cycle per model turn (other sessions interleave); yields what
    `waiting(ahead, s)` / `progress(records)` return, and returns the records. Engine-timed, so the speed
    figures do not include the waits."""
    if ZERO_GPU or PRECOMPUTE:
        return precomputed(cfg, shift, prompt)
    dec = new_decoder(cfg, shift, prompt)
    last = [time.perf_counter()]

    def each(_):
        bound_decoder(dec)
        if progress is not None and time.perf_counter() - last[0] > 0.5:
            last[0] = time.perf_counter()
            return progress(dec.cycles)
        return None

    yield from drive(dec, cycle_turn, waiting, each=each)   # each cycle in the engine loop's next round
    return as_dicts(dec.cycles)


def generation_key(prompt: str, shift: str, cfg) -> str:
    """What makes a new generation: the prompt, the head and the settings, all but max new tokens (a limit
    lowered mid-generation ends the same generation sooner: limited_decoder)."""
    return json.dumps([prompt, shift, dataclasses.asdict(dataclasses.replace(cfg, max_new_tokens=0))])


def limited_decoder(state: dict, ent: Session, limit: int) -> str | None:
    """The same generation under a new max new tokens, when it can go on: a live decoder whose KV cache was built
    for at least `limit` (ent.limit) and that has not finished. Lowered below what it has generated, it ends
    there (Finished: its cycles are kept, never thrown away). Returns a notice, or None for a new generation."""
    dec = ent.decoder
    if isinstance(dec, Replay):
        return "" if ent.limit == limit else None
    if dec.cfg.max_new_tokens == limit or (dec.done and limit < dec.cfg.max_new_tokens):
        return ""                   # as it was, or finished already: kept as it is (Finished)
    if dec.done or limit > ent.limit:
        return None
    dec.cfg = dataclasses.replace(dec.cfg, max_new_tokens=limit)    # the engine reads it at each commit
    have = len(dec.new_ids)
    if have >= limit:
        dec.finished = "max_new_tokens"
        raise Finished(f"Max new tokens is now {limit}, but this generation already has {have} new tokens: it "
                       f"ends here, its cycles kept. Raise the limit to go on, or press Reset for a new generation.")
    return f"Max new tokens is now {limit}: this generation goes on from its {have} tokens and ends at {limit}."


def ensure_decoder(state: dict, ent: Session, prompt, shift: str, cfg, idle_timeout: float) -> str:
    """The session's decoder for these settings: a new generation when there is none or the prompt/settings
    changed (max new tokens alone: the same generation, limited_decoder). A finished generation with the same
    prompt and settings is kept (Finished): a Step or Run queued behind it must not throw its text away. The
    caller has claimed `ent`; its Stop ends a generation being decoded in one go (PRECOMPUTE: Stopped, no
    decoder). Returns a notice."""
    MODEL.require()
    prompt = check_prompt(prompt)
    key = generation_key(prompt, shift, cfg)
    dec = ent.decoder
    if dec is not None and ent.key == key and state.get("source") == "live":
        notice = limited_decoder(state, ent, cfg.max_new_tokens)
        if notice is not None and not dec.done:
            return notice
        if notice is not None:
            recs = state.get("records") or []
            why = recs[-1].get("finished") if recs else None
            raise Finished(f"This generation is finished ({why or 'done'}). Press Reset to start it again, or "
                           f"change the prompt or a setting for a new one.")
    if ent.expired:
        ent.expired = False
        notice = (f"Your session was idle for over {idle_timeout / 60:.0f} minutes, so the server freed its "
                  f"decoder; started a new generation.")
    elif dec is not None and state.get("source") == "live":
        notice = "Prompt or settings changed: started a new generation."
    else:
        notice = ""
    ent.decoder = Replay(precomputed(cfg, shift, prompt, ent.stop)) if PRECOMPUTE else new_decoder(cfg, shift, prompt)
    ent.key, ent.limit = key, cfg.max_new_tokens
    state.update(records=[], prompt=prompt, source="live", seen=[0, 0.0])
    return notice


def committed_tokens(state) -> int:
    return sum(len(r["new_tokens"]) for r in state.get("records") or [])
