# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Go-style durations: parse "1m30s" / "10s" / 10 and format like Go's time.Duration.String().

ansible-operator parses the ``period`` returned by ``requeue_after`` with time.ParseDuration.
"""

from __future__ import annotations

import re

_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(value):
    """Return nanoseconds (int) for a Go duration string or a number of seconds.

    Raises ValueError for anything else, including negative durations.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"invalid duration {value!r}: must not be negative")
        return round(value * 1_000_000_000)
    text = str(value).strip()
    if not text:
        raise ValueError("invalid duration: empty")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return round(float(text) * 1_000_000_000)
    if text.startswith("-"):
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    text = text.lstrip("+")
    pos = 0
    total = 0
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m:
            raise ValueError(
                f"invalid duration {value!r}: expected e.g. 30s, 1m30s, 500ms or seconds"
            )
        total += round(float(m.group(1)) * _UNITS_NS[m.group(2)])
        pos = m.end()
    return total


def _fmt_frac(v, prec):
    """v / 10**prec as a decimal string without trailing zeros (Go's fmtFrac+fmtInt)."""
    whole, frac = divmod(v, 10**prec)
    if frac == 0:
        return str(whole)
    digits = str(frac).rjust(prec, "0").rstrip("0")
    return f"{whole}.{digits}"


def format_duration(ns):
    """Format nanoseconds like Go's time.Duration.String() (e.g. 1h0m0s, 1m30s, 1.5s, 500ms)."""
    ns = int(ns)
    if ns == 0:
        return "0s"
    if ns < 0:
        return "-" + format_duration(-ns)
    if ns < 1_000_000_000:
        if ns < 1_000:
            return f"{ns}ns"
        if ns < 1_000_000:
            return _fmt_frac(ns, 3) + "µs"
        return _fmt_frac(ns, 6) + "ms"
    secs_ns = ns % (60 * 1_000_000_000)
    minutes_total = ns // (60 * 1_000_000_000)
    out = _fmt_frac(secs_ns, 9) + "s"
    if minutes_total == 0:
        return out
    hours, minutes = divmod(minutes_total, 60)
    out = f"{minutes}m" + out
    if hours:
        out = f"{hours}h" + out
    return out


def normalize_duration(value):
    return format_duration(parse_duration(value))


REQUEUE_ARGUMENT_SPEC = {"period": {"type": "raw", "required": True, "aliases": ["time"]}}


def requeue_period(params):
    """The requeue_after result: ``period`` as a Go duration string, ``seconds`` as a number."""
    ns = parse_duration(params["period"])
    return {"changed": False, "period": format_duration(ns), "seconds": ns / 1e9}
