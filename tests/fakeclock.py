"""A clock for code that takes its time source and its sleep as arguments: time passes only when
the code under test sleeps, so no test waits for real."""

from __future__ import annotations


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
