"""Tokens as bytes, so text shows true characters in any script.

A byte-level BPE vocabulary (SmolLM2, Llama 3, Qwen) splits one Chinese, Arabic or emoji character over
several tokens; decoding each token alone gives "�". Here every token is turned into its exact bytes:
  - committed text is decoded from the joined bytes of all tokens (a character split over tokens comes out
    whole: `join_pieces`);
  - a single token that holds only part of a character is shown as its byte piece, e.g. "<E4 BD>", in the
    tree and the lists (`display_text`).
Pure Python (no torch): views use `display_text` and `join_pieces` too.
"""
from __future__ import annotations

import re

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")   # SentencePiece byte fallback (Llama 2, Mistral)


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte <-> printable-character table, inverted: character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_OF_CHAR = _bytes_to_unicode()


def _is_byte_level(tokenizer) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and "ByteLevel" in str(getattr(backend, "decoder", ""))


class TokenBytes:
    """token id -> bytes for one tokenizer (cached per id)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.byte_level = _is_byte_level(tokenizer)
        self.special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.cache: dict[int, bytes] = {}

    def __call__(self, token_id: int) -> bytes:
        token_id = int(token_id)
        b = self.cache.get(token_id)
        if b is None:
            b = self.cache[token_id] = self._bytes(token_id)
        return b

    def _bytes(self, token_id: int) -> bytes:
        tok = self.tokenizer
        piece = None
        if token_id not in self.special and hasattr(tok, "convert_ids_to_tokens"):
            piece = tok.convert_ids_to_tokens(token_id)
        if isinstance(piece, str):
            if self.byte_level and all(c in _BYTE_OF_CHAR for c in piece):
                return bytes(_BYTE_OF_CHAR[c] for c in piece)
            m = _BYTE_TOKEN.match(piece)
            if m:
                return bytes([int(m.group(1), 16)])
            if not self.byte_level and "▁" in piece:        # SentencePiece word boundary
                return piece.replace("▁", " ").encode("utf-8")
        return tok.decode([token_id], skip_special_tokens=False).encode("utf-8")


def display_text(b: bytes) -> str:
    """A token's text: its characters, with any bytes that do not form a whole character as a piece "<E4 BD>"."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        pass
    s = b.decode("utf-8", errors="backslashreplace")
    return re.sub(r"(?:\\x[0-9a-f]{2})+",
                  lambda m: "<" + " ".join(h.upper() for h in re.findall(r"[0-9a-f]{2}", m.group())) + ">", s)


def join_pieces(token_bytes: list[bytes]) -> list[tuple[list[int], str]]:
    """Group consecutive tokens so that every group decodes to whole characters: [(token positions, text)].

    A token that ends inside a character waits for the tokens that complete it; a group that never completes
    (the generation stopped mid-character) is shown as its byte pieces.
    """
    out: list[tuple[list[int], str]] = []
    pending: list[int] = []
    buf = b""
    for i, b in enumerate(token_bytes):
        pending.append(i)
        buf += b
        try:
            text = buf.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data" and len(buf) - exc.start < 4:
                continue                         # a character still being completed by the next token
            text = display_text(buf)             # invalid bytes: show them, do not hold everything back
        out.append((pending, text))
        pending, buf = [], b""
    if pending:
        out.append((pending, display_text(buf)))
    return out


def join_clusters(groups: list[tuple[list[int], str]]) -> list[tuple[list[int], str]]:
    """`join_pieces`' groups merged where a boundary between two falls inside a grapheme cluster (what a reader sees
    as one letter): a vowel sign or a virama conjunct (Devanagari, Bengali, Tamil), a Thai vowel or tone mark, an
    emoji sequence with joiners or modifiers, a combining accent. The page draws a group as one span with its kind
    mark after it, so a token boundary inside a cluster put the mark, or the span's edge, between a consonant and its
    sign, which was then drawn alone on a dotted circle. Clusters are Unicode's extended grapheme clusters (UAX #29,
    its Indic conjunct rule included), as the `regex` module's \\X finds them."""
    import regex
    ends = {m.end() for m in regex.finditer(r"\X", "".join(text for _, text in groups))}
    out: list[tuple[list[int], str]] = []
    at = 0
    for positions, text in groups:
        if out and at not in ends:            # this group begins inside the previous group's last cluster
            out[-1] = (out[-1][0] + list(positions), out[-1][1] + text)
        else:
            out.append((list(positions), text))
        at += len(text)
    return out


_PIECE = re.compile(r"<((?:[0-9A-F]{2} )*[0-9A-F]{2})>")


def piece_bytes(text: str) -> bytes:
    """A token's bytes back from its display_text: "<F0 9F>" pieces as those bytes, the rest as UTF-8. (A token
    whose own text reads like a piece, "<AB>", reads as that byte: display_text cannot tell them apart.)"""
    out, at = b"", 0
    for m in _PIECE.finditer(text or ""):
        out += text[at:m.start()].encode("utf-8") + bytes.fromhex(m.group(1).replace(" ", ""))
        at = m.end()
    return out + (text or "")[at:].encode("utf-8")


def _char_length(lead: int) -> int:
    """The length of the UTF-8 character a byte starts (0: a continuation byte or not a lead byte)."""
    return 1 if lead < 0x80 else 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else \
        4 if 0xF0 <= lead <= 0xF4 else 0


def piece_parts(before: bytes, own: bytes, after: bytes = b"") -> list[tuple[str, tuple | None]]:
    """What a token's bytes `own` build, read with the bytes before it (the path it was drafted after) and after it
    (the tokens drafted or committed after it): [(text, None)] for whole characters, and for a character the token
    holds only part of, (that character, (first byte, last byte, its length)), bytes counted from 1 within the
    character; the character is None where the bytes around do not complete it (then the text is the piece)."""
    if not own:
        return []
    stream = before + own + after
    o0, o1 = len(before), len(before) + len(own)
    i = o0
    while i > 0 and o0 - i < 3 and 0x80 <= stream[i] <= 0xBF:   # back to the lead byte of the first character
        i -= 1
    if i < o0 and i + _char_length(stream[i]) <= o0:
        i = o0                            # the byte behind starts no character that reaches into own: a stray piece
    out: list[tuple[str, tuple | None]] = []
    while i < o1:
        n = _char_length(stream[i])
        whole = stream[i:i + n] if n else b""
        try:
            char = whole.decode("utf-8") if n and len(whole) == n else None
        except UnicodeDecodeError:
            char = None
        if n == 0:                                            # a stray byte: shown as itself
            out.append((display_text(stream[i:i + 1]), None))
            i += 1
            continue
        if i >= o0 and i + n <= o1 and char is not None:
            out.append((char, None))
        else:
            a, b = max(i, o0) - i + 1, min(i + n, o1) - i
            out.append((char if char is not None else display_text(stream[max(i, o0):min(i + n, o1)]), (a, b, n)
                        if char is not None else (a, b, n, None)))
        i += n
    merged: list[tuple[str, tuple | None]] = []
    for text, part in out:                                    # whole characters side by side: one text
        if part is None and merged and merged[-1][1] is None:
            merged[-1] = (merged[-1][0] + text, None)
        else:
            merged.append((text, part))
    return merged


def piece_label(before: bytes, own: bytes, after: bytes = b"") -> str | None:
    """A token that holds part of a character, said with the character it builds: "🦅 (bytes 1–2 of 4)", or "<F0 9F>
    (bytes 1–2 of 4, character unknown)" where the bytes around do not complete it; None for a token of whole
    characters."""
    parts = piece_parts(before, own, after)
    if all(p is None for _, p in parts):
        if own and 0x80 <= own[0] <= 0xBF and display_text(own) != own.decode("utf-8", "replace"):
            return f"{display_text(own)} (the end of a character begun before it)"   # its lead byte is not here
        return None
    out = ""
    for k, (text, part) in enumerate(parts):
        if part is None:
            out += text
            continue
        a, b, n = part[:3]
        which = f"byte {a}" if a == b else f"bytes {a}–{b}"
        sep = " + " if k and parts[k - 1][1] is not None else ""    # two pieces side by side
        out += sep + (f"{text} ({which} of {n})" if len(part) == 3 else f"{text} ({which} of {n}, character unknown)")
    return out
