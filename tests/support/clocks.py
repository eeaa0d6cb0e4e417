"""A clock a test moves by hand, for the product's parts that take a ``clock`` callable."""

from __future__ import annotations


class Clock:
    """Reads ``now``, which the test sets or advances; starts at 0."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now
