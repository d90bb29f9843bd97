"""Questions first: a background handling waits while a question is in the worker, marks what it
writes, and never waits longer than its cap (pure: whether a question waits is given)."""

import asyncio
import time

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.streams.runtime import priority
from memstream.streams.runtime.priority import BACKGROUND, QuestionsFirst


class Questions:
    """How many checks a question stays in the worker for (None: for ever)."""

    def __init__(self, checks: int | None):
        self.left = checks
        self.asked: list[frozenset[str]] = []

    def waiting(self, topics: frozenset[str]) -> bool:
        self.asked.append(topics)
        if self.left is None:
            return True
        self.left -= 1
        return self.left >= 0


def wait(questions: Questions) -> tuple[bool, float, Metrics]:
    metrics = Metrics()
    gate = QuestionsFirst(Settings(topic_prefix="m"), questions, metrics)  # type: ignore[arg-type]

    async def handling() -> tuple[bool, float]:
        started = time.monotonic()
        await gate.wait()
        return BACKGROUND.get(), time.monotonic() - started

    marked, waited = asyncio.run(handling())
    return marked, waited, metrics


def test_background_work_waits_for_the_question_and_is_marked():
    questions = Questions(3)
    marked, waited, metrics = wait(questions)
    assert marked, "what the handling writes carries the header"
    assert questions.asked[0] == frozenset({"m.queries"})
    assert len(questions.asked) == 4, "looked until the question was answered"
    assert waited >= 2 * priority.POLL_S
    assert metrics.background_yield_seconds._sum.get() > 0


def test_with_no_question_it_goes_at_once_and_nothing_is_observed():
    marked, waited, metrics = wait(Questions(0))
    assert marked and waited < 0.1
    assert metrics.background_yield_seconds._sum.get() == 0


def test_a_stream_of_questions_delays_background_work_but_never_stops_it(monkeypatch):
    monkeypatch.setattr(priority, "MAX_WAIT_S", 0.05)
    _, waited, _ = wait(Questions(None))
    assert 0.05 <= waited < 1.0


def test_the_mark_stays_with_the_handling_that_set_it():
    async def run() -> list[bool]:
        gate = QuestionsFirst(Settings(topic_prefix="m"), Questions(0), Metrics())  # type: ignore[arg-type]
        seen = []

        async def background() -> None:
            await gate.wait()
            seen.append(BACKGROUND.get())

        async def live() -> None:
            await asyncio.sleep(0)
            seen.append(BACKGROUND.get())

        await asyncio.gather(background(), live())
        seen.append(BACKGROUND.get())
        return seen

    assert asyncio.run(run()) == [True, False, False]
