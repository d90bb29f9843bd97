"""A worker the group went on without restarts, like a frozen one: its tables may be stale (the
coordinator is a stand-in with aiokafka's attributes; faust_compat reaches it as on a live app)."""

from __future__ import annotations

from types import SimpleNamespace

from memstream.streams.runtime import faust_compat


class Closing:
    def __init__(self) -> None:
        self.closed = False

    def done(self) -> bool:
        return self.closed


class Coordinator:
    """What aiokafka's GroupCoordinator.reset_generation does, and the attributes the hook reads."""

    def __init__(self, generation: int) -> None:
        self.generation, self.member_id, self.group_id = generation, "m-1", "memory-memstream"
        self._closing = Closing()
        self.resets = 0

    def reset_generation(self) -> None:
        self.generation, self.member_id = -1, ""
        self.resets += 1


def app_with(coordinator: Coordinator) -> SimpleNamespace:
    consumer = SimpleNamespace(_coordinator=coordinator)
    return SimpleNamespace(consumer=SimpleNamespace(_thread=SimpleNamespace(_ensure_consumer=lambda: consumer)))


def test_a_reset_of_a_joined_member_is_an_expulsion_and_still_resets():
    coordinator = Coordinator(generation=7)
    seen: list[str] = []
    assert faust_compat.watch_expulsion(app_with(coordinator), seen.append)
    assert faust_compat.watch_expulsion(app_with(coordinator), seen.append)  # installed once per coordinator
    coordinator.reset_generation()  # a heartbeat answered UnknownMemberId / IllegalGeneration
    assert len(seen) == 1 and "went on without member m-1" in seen[0]
    assert coordinator.resets == 1 and coordinator.generation == -1  # aiokafka rejoins as before


def test_no_expulsion_before_the_first_join_or_while_closing():
    seen: list[str] = []
    before = Coordinator(generation=-1)
    faust_compat.watch_expulsion(app_with(before), seen.append)
    before.reset_generation()
    closing = Coordinator(generation=3)
    faust_compat.watch_expulsion(app_with(closing), seen.append)
    closing._closing.closed = True
    closing.reset_generation()  # leaving the group on a clean stop
    assert seen == [] and before.resets == closing.resets == 1


def test_an_app_without_a_live_consumer_is_not_watched_yet():
    assert not faust_compat.watch_expulsion(SimpleNamespace(consumer=SimpleNamespace()), lambda r: None)
