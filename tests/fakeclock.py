"""A clock a test moves by hand: call it for the time, assign `now` to change it."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Clock(Generic[T]):
    """Any kind of time: seconds (FakeClock) or datetimes."""

    def __init__(self, now: T) -> None:
        self.now = now

    def __call__(self) -> T:
        return self.now


class FakeClock(Clock[float]):
    """Seconds, from 1000.0 unless told otherwise."""

    def __init__(self, now: float = 1000.0) -> None:
        super().__init__(now)
