"""Local budget periods (common/tz.c) against Python's zoneinfo, a reader of the same TZif
files written apart from ours, over every zone of the system: the day, week and month
containing instants spread over 1990-2060 (past Debian's transitions, which end in 2037,
so the footers' rules count too) and the instants either side of each period's bounds."""
import os
import pathlib
import random
import subprocess
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, available_timezones

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("TALLY_BUILD", "build")
UTC = timezone.utc


def _first_local(z, wall):
    """The first instant (unix s) whose local time in z is at least wall (naive)."""
    hits = []
    for fold in (0, 1):
        u = int(wall.replace(tzinfo=z, fold=fold).timestamp())
        if datetime.fromtimestamp(u, z).replace(tzinfo=None) == wall:
            hits.append(u)
    if hits:
        return min(hits)
    lo = int(wall.replace(tzinfo=UTC).timestamp()) - 2 * 86400
    hi = lo + 4 * 86400
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, z).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return hi


def _start(kind, wall):
    day = wall.replace(hour=0, minute=0, second=0, microsecond=0)
    if kind == "day":
        return day
    if kind == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def _next(kind, wall):
    if kind == "day":
        return wall + timedelta(days=1)
    if kind == "week":
        return wall + timedelta(days=7)
    return (wall.replace(day=28) + timedelta(days=4)).replace(day=1)


def _period(z, kind, ms):
    wall = _start(kind, datetime.fromtimestamp(ms // 1000, z).replace(tzinfo=None))
    start = _first_local(z, wall) * 1000
    if start > ms:
        wall = _start(kind, wall - timedelta(seconds=1))
        start = _first_local(z, wall) * 1000
    end = _first_local(z, _next(kind, wall)) * 1000
    if end <= ms:
        start, end = end, _first_local(z, _next(kind, _next(kind, wall))) * 1000
    return start, end


def _c_periods(name, instants):
    out = subprocess.run([str(BUILD / "test_tz"), "periods", name] + [str(i) for i in instants],
                         capture_output=True, text=True, check=True).stdout.split()
    nums = [int(x) for x in out]
    return [tuple(nums[i:i + 2]) for i in range(0, len(nums), 2)]


ZONES = sorted(z for z in available_timezones()
               if not z.startswith(("posix/", "right/")) and z not in ("Factory", "localtime"))


@pytest.mark.parametrize("chunk", range(8))
def test_every_zone_as_zoneinfo_says(chunk):
    if not (BUILD / "test_tz").exists():
        pytest.fail(f"{BUILD}/test_tz is missing: run `make unit-bins` first")
    rnd = random.Random(chunk)
    lo = int(datetime(1990, 1, 1, tzinfo=UTC).timestamp())
    hi = int(datetime(2060, 1, 1, tzinfo=UTC).timestamp())
    bad = []
    for name in ZONES[chunk::8]:
        z = ZoneInfo(name)
        instants = [rnd.randrange(lo, hi) * 1000 + rnd.randrange(1000) for _ in range(24)]
        want = []
        for ms in instants:
            for kind in ("day", "week", "month"):
                want.append(_period(z, kind, ms))
        # the instants either side of each bound found
        edges = sorted({b + d for (s, e) in want for b in (s, e) for d in (-1, 0)})
        for ms in edges:
            for kind in ("day", "week", "month"):
                want.append(_period(z, kind, ms))
        got = _c_periods(name, instants + edges)
        if got != want:
            diff = [(ms, g, w) for ms, g, w in zip([m for m in instants + edges for _ in range(3)],
                                                   got, want) if g != w]
            bad.append((name, diff[:3]))
    assert not bad, bad
