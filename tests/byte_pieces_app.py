"""app.py with two things the tiny random target never shows, for tests/test_browser_issue50.py: what the real model
gives now and then, made sure.

* The same-law draws (the Lens's panel and walkthrough step 4's "Draw both") put most of their mass on three tokens
  that each hold one byte of a longer character (0x80 and up: what a Hindi letter or an emoji is split into), so
  the bars and the note must name them by their bytes ("<E0>"), never U+FFFD.
* The recorded run of the first paint ends with the chat template's end token (<|im_end|>), as an answer that
  finished does: the text must show it as the named end mark, not as markup.

Takes app.py's arguments (tests/servers.app_subprocess(..., script="tests/byte_pieces_app.py"))."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tabs.common as common  # noqa: E402
import tabs.law as law  # noqa: E402

PIECES: list[int] = []


def root_dists(target, head, ids, *settings):
    """p = q: three byte pieces with 0.3 each, the rest of the vocabulary sharing 0.1 (whatever the settings)."""
    import torch
    if not PIECES:
        PIECES.extend([t for t in range(target.vocab_size)
                       if len(target.token_bytes(t)) == 1 and target.token_bytes(t)[0] >= 0x80][:3])
    p = torch.full((target.vocab_size,), 0.1 / target.vocab_size)
    p[PIECES] += 0.3
    return p, p.clone()


def end_the_answer(trace: dict) -> None:
    """The recorded run's last cycle gives the chat template's end token, <|im_end|> (id 2 in the embedded
    vocabulary), as its target token: the answer ends there ('eos')."""
    rec = trace["records"][-1]
    end = "<|im_end|>"
    assert len(rec["new_tokens"]) == rec["accept_length"] + 1, "the last cycle committed its target token"
    rec.update(bonus_text=end, bonus_token=2, finished="eos", new_tokens=list(rec["new_tokens"][:-1]) + [2],
               new_token_bytes=list(rec["new_token_bytes"][:-1]) + [end.encode().hex()])


law.root_dists = root_dists
end_the_answer(common.TRACE)   # the same dict every module imported (tabs.lens, tabs.walkthrough...)

if __name__ == "__main__":
    import app
    app.main(sys.argv[1:])
