import gc
import weakref

from memstream.streams.runtime.worker import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collection frees it


def test_the_startup_heap_is_left_out_of_later_collections():
    """What the worker holds when it starts serving (models, libraries, recovered tables) is frozen: a
    full collection no longer walks it (with the loop stopped, longer than a reply takes),
    while what comes later is collected as before."""
    gc.unfreeze()
    startup = Node()
    seen_startup = weakref.ref(startup)
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 0
        del startup
        later = Node()
        seen_later = weakref.ref(later)
        del later
        gc.collect()
        assert seen_later() is None, "an object made after the freeze is collected"
        assert seen_startup() is not None, "a frozen object is not even looked at"
    finally:
        gc.unfreeze()
    gc.collect()
    assert seen_startup() is None
