"""Per-session state on the server: each browser session's decoder (and its KV cache), whether something is
running in it, its Stop flag and its Play flag. Bounded: at most `max_sessions` entries; idle ones are freed
after `idle_timeout` seconds, and at the cap the least recently used *idle* one makes room. A running session
is never evicted (its Run would lose its decoder under it): when every entry is running, a new session is
refused with a message instead.

Every read or change of the table holds `lock`; an entry's own fields are changed by the one request that
`claim`ed it (Step, Run), so two requests of one tab cannot replace the decoder under each other.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field

from .errors import Busy


@dataclass
class Session:
    decoder: object = None                 # EagleDecoder or Replay; a Race's entry: its lanes
    key: str | None = None                 # the prompt and settings the decoder was built for
    limit: int = 0                         # the max new tokens it was built for (its KV cache's size)
    stop: threading.Event = field(default_factory=threading.Event)
    playing: threading.Event = field(default_factory=threading.Event)   # Play's animation keeps going while set
    used: float = 0.0
    running: str | None = None             # "step" | "run" while a request decodes in this session; "race"
    hash: str | None = None                # the browser session (closing the tab frees it)
    expired: bool = False                  # the page showed a generation the server had freed


class SessionStore:
    def __init__(self, max_sessions: int = 64, idle_timeout: float | None = None):
        self.max_sessions = max_sessions
        self.idle_timeout = float(os.environ.get("EAGLE_LENS_IDLE_TIMEOUT", 20 * 60)) if idle_timeout is None \
            else idle_timeout
        self.lock = threading.Lock()
        self.entries: dict[str, Session] = {}

    # ----------------------------------------------------------------- lookup and creation
    def get(self, sid: str | None) -> Session | None:
        with self.lock:
            return self.entries.get(sid or "")

    def session(self, state: dict, session_hash: str | None = None) -> Session:
        """The entry of this page's state (`state["sid"]`), created when missing. Raises Busy when the server
        is full of running sessions."""
        now = time.time()
        self.sweep(now)
        with self.lock:
            sid = state.get("sid")
            ent = self.entries.get(sid or "")
            if ent is None:
                self._make_room()
                # a page showing a live generation whose entry is gone: the server freed it (idle, restart)
                freed = bool(sid) and state.get("source") == "live" and bool(state.get("records"))
                state["sid"] = sid or uuid.uuid4().hex
                ent = self.entries[state["sid"]] = Session(used=now, hash=session_hash, expired=freed)
            ent.used = now
            return ent

    def open(self, kind: str, session_hash: str | None = None) -> tuple[str, Session]:
        """An entry for work that is not a page's own generation (a Race: `kind` "race"), counted in the stats
        and the cap like a page's, running from the start (never evicted) until `drop(sid)`; closing the tab
        (`drop_hash`) sets its Stop. Raises Busy when the server is full of running sessions."""
        now = time.time()
        self.sweep(now)
        with self.lock:
            self._make_room()
            sid = f"{kind}-{uuid.uuid4().hex}"
            ent = self.entries[sid] = Session(used=now, hash=session_hash, running=kind)
        return sid, ent

    def _make_room(self):
        """At the cap: free an idle entry (the lock is held): the least recently used one without a decoder if
        there is one (a page load, a Play), else the least recently used idle decoder."""
        while len(self.entries) >= self.max_sessions:
            idle = [s for s, e in self.entries.items() if not e.running]
            if not idle:
                raise Busy(f"The server is busy: all {self.max_sessions} sessions are decoding. Try again in a "
                           "moment.")
            victim = self.entries.pop(min(idle, key=lambda s: (self.entries[s].decoder is not None,
                                                               self.entries[s].used)))
            victim.stop.set()
            victim.playing.clear()

    # ----------------------------------------------------------------- running
    def claim(self, ent: Session, what: str) -> bool:
        """Mark the entry as running `what` ("step" | "run"); False when something already runs in it."""
        with self.lock:
            if ent.running:
                return False
            ent.running = what
            ent.stop.clear()
            return True

    def running(self) -> int:
        """Entries with something running (a Step, a Run, a Race)."""
        with self.lock:
            return sum(bool(e.running) for e in self.entries.values())

    def release(self, ent: Session):
        with self.lock:
            ent.running = None
            ent.used = time.time()

    # ----------------------------------------------------------------- freeing
    def drop(self, sid: str | None):
        """gr.State's delete callback: the browser session ended, forget its decoder."""
        with self.lock:
            ent = self.entries.pop(sid or "", None)
        if ent is not None:
            ent.stop.set()
            ent.playing.clear()

    def drop_hash(self, session_hash: str | None) -> int:
        """The tab closed: free that browser session's entries at once (a running Run stops at its next cycle)."""
        if not session_hash:
            return 0
        with self.lock:
            gone = [self.entries.pop(s) for s in [s for s, e in self.entries.items() if e.hash == session_hash]]
        for ent in gone:
            ent.stop.set()
            ent.playing.clear()
        return len(gone)

    def sweep(self, now: float | None = None) -> int:
        """Free the decoders (and KV caches) of sessions idle for idle_timeout; returns how many were freed."""
        now = time.time() if now is None else now
        with self.lock:
            old = [s for s, e in self.entries.items() if now - e.used > self.idle_timeout and not e.running]
            for sid in old:
                self.entries.pop(sid).playing.clear()
        return len(old)

    def stats(self) -> dict:
        """Entries (pages and Races), decoders (a Race's lanes count one each), running entries, Races."""
        with self.lock:
            ents = list(self.entries.values())
        return {"sessions": len(ents), "decoders": sum(decoders(e) for e in ents),
                "running": sum(bool(e.running) for e in ents), "races": sum(e.running == "race" for e in ents)}


def decoders(ent: Session) -> int:
    """Decoders an entry holds: a page's one (or none), a Race's lanes."""
    return len(ent.decoder) if isinstance(ent.decoder, (list, tuple)) else int(ent.decoder is not None)


SESSIONS = SessionStore()
