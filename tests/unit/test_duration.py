from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import (
    format_duration,
    normalize_duration,
    parse_duration,
)

S = 1_000_000_000


@pytest.mark.parametrize(
    "given,ns",
    [
        ("10s", 10 * S),
        (10, 10 * S),
        (1.5, 1_500_000_000),
        ("1m30s", 90 * S),
        ("2h", 7200 * S),
        ("500ms", 500_000_000),
        ("1.5h", 5400 * S),
        ("30", 30 * S),
        ("0", 0),
        ("1h2m3s4ms", 3723004 * 10**6),
    ],
)
def test_parse(given, ns):
    assert parse_duration(given) == ns


@pytest.mark.parametrize("bad", ["", "10x", "s", "-5s", -1, "1 m", True, "abc"])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    "ns,text",
    [
        (0, "0s"),
        (10 * S, "10s"),
        (90 * S, "1m30s"),
        (3600 * S, "1h0m0s"),
        (1_500_000_000, "1.5s"),
        (500_000_000, "500ms"),
        (1500, "1.5µs"),
        (999, "999ns"),
        (3723 * S, "1h2m3s"),
    ],
)
def test_format_like_go(ns, text):
    assert format_duration(ns) == text


def test_normalize():
    assert normalize_duration("90s") == "1m30s"
    assert normalize_duration(5) == "5s"
