"""Write-time normalisation of time expressions against the utterance's own timestamp.

"yesterday" said on 8 May 2023 is 7 May 2023 forever; resolving at write time keeps the fact
true when it is read years later (AdaMem). The original phrase is kept beside the result.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

Granularity = Literal["day", "week", "weekend", "month", "year"]

WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = [m.lower() for m in calendar.month_name[1:]]
MONTH_ABBR = [m.lower() for m in calendar.month_abbr[1:]]
NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple of": 2,
    "a couple of": 2,
    "few": 3,
    "a few": 3,
    "several": 3,
}
UNITS = {
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
}


@dataclass(frozen=True)
class TimeMention:
    phrase: str
    start: datetime  # first instant of the resolved period (UTC)
    granularity: Granularity

    def label(self) -> str:
        if self.granularity == "year":
            return self.start.strftime("%Y")
        if self.granularity == "month":
            return self.start.strftime("%B %Y")
        if self.granularity in ("week", "weekend"):
            return f"the {self.granularity} of {self.start.strftime('%d %B %Y')}"
        return self.start.strftime("%d %B %Y")


def _day(dt: datetime) -> datetime:
    return dt.replace(hour=0, minute=0, second=0, microsecond=0)


def _add_months(dt: datetime, months: int) -> datetime:
    total = dt.year * 12 + (dt.month - 1) + months
    year, month = divmod(total, 12)
    day = min(dt.day, calendar.monthrange(year, month + 1)[1])
    return dt.replace(year=year, month=month + 1, day=day)


def _shift(anchor: datetime, n: int, unit: str) -> tuple[datetime, Granularity]:
    if unit == "day":
        return _day(anchor + timedelta(days=n)), "day"
    if unit == "week":
        d = _day(anchor + timedelta(weeks=n))
        return d - timedelta(days=d.weekday()), "week"
    if unit == "month":
        return _day(_add_months(anchor, n)).replace(day=1), "month"
    return _day(anchor).replace(year=anchor.year + n, month=1, day=1), "year"


_NUM = (
    r"(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|(?:a\s+)?couple of|(?:a\s+)?few|several)"
)
_UNIT = r"(days?|weeks?|months?|years?)"
_WD = "|".join(WEEKDAYS)
_MON = "|".join(MONTHS + MONTH_ABBR)

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("ago", re.compile(rf"\b{_NUM}\s+{_UNIT}\s+ago\b", re.I)),
    ("in_n", re.compile(rf"\bin\s+{_NUM}\s+{_UNIT}\b", re.I)),
    ("rel_unit", re.compile(r"\b(last|next|this|past|coming)\s+(week|weekend|month|year)\b", re.I)),
    ("rel_weekday", re.compile(rf"\b(last|next|this|on)\s+({_WD})\b", re.I)),
    (
        "day_word",
        re.compile(
            r"\b(the day before yesterday|day before yesterday|the day after tomorrow|yesterday|today|tonight|"
            r"tomorrow|this morning|this afternoon|this evening|last night)\b",
            re.I,
        ),
    ),
    ("date", re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MON})\.?,?\s+(\d{{4}})\b", re.I)),
    ("date_us", re.compile(rf"\b({_MON})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)),
    ("month_year", re.compile(rf"\b({_MON})\.?,?\s+(\d{{4}})\b", re.I)),
    ("year", re.compile(r"\b(?:in|since|during|of|back in)\s+((?:19|20)\d{2})\b", re.I)),
]


def _number(word: str) -> int:
    word = re.sub(r"\s+", " ", word.lower().strip())
    return int(word) if word.isdigit() else NUMBER_WORDS.get(word, 1)


def _month_index(word: str) -> int:
    w = word.lower().rstrip(".")
    return (MONTHS.index(w) if w in MONTHS else MONTH_ABBR.index(w[:3])) + 1


def _resolve(kind: str, m: re.Match[str], anchor: datetime) -> tuple[datetime, Granularity] | None:
    g = m.groups()
    if kind == "ago":
        return _shift(anchor, -_number(g[0]), UNITS[g[1].lower()])
    if kind == "in_n":
        return _shift(anchor, _number(g[0]), UNITS[g[1].lower()])
    if kind == "rel_unit":
        rel, unit = g[0].lower(), g[1].lower()
        n = {"last": -1, "past": -1, "next": 1, "coming": 1, "this": 0}[rel]
        if unit == "weekend":
            d = _day(anchor) + timedelta(weeks=n)
            saturday = d + timedelta(days=(5 - d.weekday()))
            if rel in ("last", "past") and (5 - anchor.weekday()) > 0:
                saturday = _day(anchor) + timedelta(days=(5 - anchor.weekday()) - 7)
            return saturday, "weekend"
        return _shift(anchor, n, unit)
    if kind == "rel_weekday":
        rel, wd = g[0].lower(), WEEKDAYS.index(g[1].lower())
        base = _day(anchor)
        delta = wd - base.weekday()
        if rel == "last":
            delta = delta - 7 if delta >= 0 else delta
        elif rel == "next":
            delta = delta + 7 if delta <= 0 else delta
        elif rel == "on":
            # "on Saturday" in a past-tense chat most often means the most recent one.
            delta = delta - 7 if delta > 0 else delta
        return base + timedelta(days=delta), "day"
    if kind == "day_word":
        word = g[0].lower()
        offset = {
            "the day before yesterday": -2,
            "day before yesterday": -2,
            "yesterday": -1,
            "last night": -1,
            "the day after tomorrow": 2,
            "tomorrow": 1,
        }.get(word, 0)
        return _day(anchor) + timedelta(days=offset), "day"
    if kind == "date":
        day, month, year = int(g[0]), _month_index(g[1]), int(g[2])
        return _safe_date(year, month, day), "day"
    if kind == "date_us":
        month, day, year = _month_index(g[0]), int(g[1]), int(g[2])
        return _safe_date(year, month, day), "day"
    if kind == "month_year":
        return datetime(int(g[1]), _month_index(g[0]), 1, tzinfo=timezone.utc), "month"
    if kind == "year":
        return datetime(int(g[0]), 1, 1, tzinfo=timezone.utc), "year"
    return None


def _safe_date(year: int, month: int, day: int) -> datetime:
    day = max(1, min(day, calendar.monthrange(year, month)[1]))
    return datetime(year, month, day, tzinfo=timezone.utc)


def find_time_mentions(text: str, anchor: datetime) -> list[TimeMention]:
    """Every time expression in ``text`` resolved against ``anchor``, in text order, non-overlapping."""
    anchor = anchor if anchor.tzinfo else anchor.replace(tzinfo=timezone.utc)
    anchor = anchor.astimezone(timezone.utc)
    found: list[tuple[int, int, TimeMention]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end, _ in found):
                continue
            try:
                resolved = _resolve(kind, m, anchor)
            except (OverflowError, ValueError):
                # Outside the calendar (a turn dated 0001-01-01 said "yesterday", "year 0"): no time.
                continue
            if resolved is None:
                continue
            found.append((m.start(), m.end(), TimeMention(m.group(0), resolved[0], resolved[1])))
    found.sort(key=lambda t: t[0])
    return [mention for _, _, mention in found]


def resolve_first(text: str, anchor: datetime) -> TimeMention | None:
    mentions = find_time_mentions(text, anchor)
    return mentions[0] if mentions else None


_LOCOMO_DT = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I)


def parse_locomo_datetime(value: str) -> datetime:
    """LoCoMo session times look like '1:56 pm on 8 May, 2023'."""
    m = _LOCOMO_DT.match(value)
    if not m:
        raise ValueError(f"unrecognised LoCoMo date {value!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), _month_index(month), int(day), h, int(minute), tzinfo=timezone.utc)
