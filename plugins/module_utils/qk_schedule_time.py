# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""When an EtcdBackupSchedule's runs are: its spec.schedule parsed, and RFC 3339 times.

``parse_schedule()`` turns spec.schedule into an object with ``latest(now, after)`` (the most
recent scheduled time in (after, now]) and ``following(now, after)`` (the next one), or raises
``ScheduleError`` saying what is wrong. Time rules, all UTC:
- cron (five fields, through cronsim, plus @yearly/@annually/@monthly/@weekly/@daily/@midnight/
  @hourly): the scheduled times of the expression after the schedule's creation;
- ``@every <duration>`` (Go syntax, whole seconds, at least 10s): every <duration> counted from
  the last scheduled time (the schedule's creation before the first).

Used by qk_schedule (the planner) and qk_schedule_retention (the backups' ages).
"""

from __future__ import annotations

import datetime

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    format_timestamp,
    parse_timestamp,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import parse_duration

MIN_EVERY_SECONDS = 10
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
UTC = datetime.UTC
ONE_SECOND = datetime.timedelta(seconds=1)


class ScheduleError(ValueError):
    """spec.schedule cannot be used; the message says why."""


def parse_time(text):
    """An RFC 3339 timestamp as an aware UTC datetime; None for None or garbage."""
    if not text:
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


def format_time(value):
    return format_timestamp(value) if value else None


def _whole_seconds(value):
    return value.replace(microsecond=0)


class CronSchedule:
    """A five-field cron expression (or a macro), UTC."""

    def __init__(self, expression):
        from cronsim import CronSim, CronSimError

        self._cronsim = CronSim
        fields = MACROS.get(expression, expression).split()
        if len(fields) != 5:
            raise ScheduleError(
                f"{expression!r} has {len(fields)} field(s); a cron schedule has five (minute "
                "hour day-of-month month day-of-week), or is one of "
                f"{', '.join(MACROS)} or @every <duration>"
            )
        self.expression = " ".join(fields)
        try:
            CronSim(self.expression, datetime.datetime(2000, 1, 1, tzinfo=UTC))
        except (CronSimError, ValueError) as exc:
            raise ScheduleError(f"{expression!r} is not a valid cron expression: {exc}") from exc

    def latest(self, now, after):
        """The most recent scheduled time in (after, now], or None."""
        probe = _whole_seconds(now) + ONE_SECOND
        found = next(self._cronsim(self.expression, probe, reverse=True))
        return found if found > after else None

    def following(self, now, after):
        """The first scheduled time after both ``now`` and ``after``."""
        return next(self._cronsim(self.expression, _whole_seconds(max(now, after))))


class EverySchedule:
    """``@every <duration>``: a fixed interval from the last scheduled time."""

    def __init__(self, expression, text):
        try:
            ns = parse_duration(text)
        except ValueError as exc:
            raise ScheduleError(f"{expression!r}: {exc}") from exc
        if ns % 1_000_000_000:
            raise ScheduleError(f"{expression!r}: the interval must be whole seconds")
        if ns < MIN_EVERY_SECONDS * 1_000_000_000:
            raise ScheduleError(
                f"{expression!r}: the interval must be at least {MIN_EVERY_SECONDS}s"
            )
        self.interval = datetime.timedelta(seconds=ns // 1_000_000_000)
        self.expression = expression

    def latest(self, now, after):
        steps = (now - after) // self.interval
        return after + steps * self.interval if steps >= 1 else None

    def following(self, now, after):
        steps = max((now - after) // self.interval, 0)
        return after + (steps + 1) * self.interval


def parse_schedule(expression):
    """A schedule object with ``latest(now, after)`` and ``following(now, after)``; raises
    ``ScheduleError`` saying what is wrong."""
    text = " ".join(str(expression or "").split())
    if not text:
        raise ScheduleError("spec.schedule is empty")
    if text.startswith("@every"):
        rest = text[len("@every") :].strip()
        if not rest:
            raise ScheduleError(f"{text!r}: @every needs a duration, e.g. @every 1h30m")
        return EverySchedule(text, rest)
    if text.startswith("@") and text not in MACROS:
        raise ScheduleError(
            f"{text!r} is not a known macro; use one of {', '.join(MACROS)} or @every <duration>"
        )
    return CronSchedule(text)
