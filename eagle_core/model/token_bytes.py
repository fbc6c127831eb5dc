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
