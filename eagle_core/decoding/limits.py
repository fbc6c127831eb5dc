"""The one table of input limits: the page's sliders, the page's input normalisation, DecodeConfig.check and the
benchmark all read these, so a value the page accepts is a value the engine accepts, and the other way round."""
from __future__ import annotations

from dataclasses import dataclass

from ..model.attention import MAX_VERIFY_ROWS   # the most rows a verification pass may hold (root included)


@dataclass(frozen=True)
class Limit:
    lo: float
    hi: float
    kind: type          # int or float
    label: str          # how the page and the error messages name it

    def check(self, value) -> None:
        """Raise ValueError with a message for users when `value` is outside [lo, hi]."""
        if not (self.lo <= value <= self.hi):
            raise ValueError(f"{self.label} must be between {self.lo:g} and {self.hi:g} (got {value})")


# keys are DecodeConfig field names, and the “How can I” tab's branches
LIMITS: dict[str, Limit] = {
    "temperature": Limit(0.0, 2.0, float, "Temperature"),
    "top_p": Limit(0.05, 1.0, float, "Top-p"),
    "seed": Limit(0, 2 ** 31 - 1, int, "Seed"),
    "depth": Limit(1, min(12, MAX_VERIFY_ROWS - 1), int, "Depth"),
    "top_k": Limit(1, 16, int, "Top-k"),
    "total_tokens": Limit(2, MAX_VERIFY_ROWS - 1, int, "Total tokens"),   # + the root = one exact pass
    "max_new_tokens": Limit(1, 512, int, "Max new tokens"),
    "branches": Limit(2, 6, int, "Branches"),      # the “How can I” tab's (not a DecodeConfig field)
}
