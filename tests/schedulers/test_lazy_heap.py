"""``schedulers.base.LazyHeap``: a min-heap of table ids keyed by a priority, with lazy
invalidation and compaction. Hand cases plus a model-based hypothesis test against a plain
dict: at every step the smallest live (key, tid) is what peek/pop report."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from schedulers.base import LazyHeap
from testing.depth import examples


def drain(heap: LazyHeap) -> list[int]:
    out = []
    while (tid := heap.pop()) is not None:
        out.append(tid)
    return out


def test_empty_heap() -> None:
    heap = LazyHeap()
    assert len(heap) == 0
    assert heap.peek() is None
    assert heap.pop() is None
    assert 0 not in heap
    heap.set(3, None)  # removing an absent table is a no-op
    assert len(heap) == 0


def test_pops_in_key_order_and_peek_does_not_remove() -> None:
    heap = LazyHeap()
    for tid, key in [(0, 5.0), (1, 2.0), (2, 9.0), (3, 1.0)]:
        heap.set(tid, key)
    assert len(heap) == 4
    assert 2 in heap
    assert heap.peek() == (1.0, 3)
    assert heap.peek() == (1.0, 3)
    assert len(heap) == 4
    assert heap.pop() == 3
    assert 3 not in heap
    assert len(heap) == 3
    assert drain(heap) == [1, 0, 2]
    assert len(heap) == 0


def test_equal_keys_break_ties_by_table_id() -> None:
    heap = LazyHeap()
    for tid in (4, 1, 3, 0, 2):
        heap.set(tid, 7.0)
    assert drain(heap) == [0, 1, 2, 3, 4]


def test_tuple_keys() -> None:
    heap = LazyHeap()
    heap.set(0, (1.0, 5))
    heap.set(1, (1.0, 2))
    heap.set(2, (0.5, 9))
    assert drain(heap) == [2, 1, 0]


def test_key_changes_take_effect_both_ways() -> None:
    heap = LazyHeap()
    heap.set(0, 1.0)
    heap.set(1, 2.0)
    heap.set(0, 3.0)  # increase: the old entry (1.0, 0) is now stale
    assert heap.peek() == (2.0, 1)
    heap.set(1, 0.5)  # decrease
    assert heap.peek() == (0.5, 1)
    assert len(heap) == 2
    assert drain(heap) == [1, 0]


def test_setting_the_same_key_again_is_idempotent() -> None:
    heap = LazyHeap()
    heap.set(0, 1.0)
    heap.set(0, 1.0)
    heap.set(0, 1.0)
    assert len(heap) == 1
    assert heap.pop() == 0
    assert heap.pop() is None


def test_returning_to_an_old_key_does_not_duplicate_the_table() -> None:
    # Entries (1, 0), (2, 0), (1, 0) are in the heap; the table must come out once.
    heap = LazyHeap()
    heap.set(0, 1.0)
    heap.set(0, 2.0)
    heap.set(0, 1.0)
    heap.set(1, 1.5)
    assert drain(heap) == [0, 1]


def test_reinserted_after_pop_with_a_key_a_stale_entry_still_holds() -> None:
    heap = LazyHeap()
    heap.set(0, 1.0)
    heap.set(0, 5.0)  # stale (1.0, 0) remains
    heap.set(0, 1.0)  # live again at 1.0: two (1.0, 0) entries
    assert heap.pop() == 0
    heap.set(0, 1.0)  # back, while an old (1.0, 0) entry may still sit in the heap
    assert len(heap) == 1
    assert heap.pop() == 0
    assert heap.pop() is None
    assert len(heap) == 0


def test_remove_via_none() -> None:
    heap = LazyHeap()
    heap.set(0, 1.0)
    heap.set(1, 2.0)
    heap.set(0, None)
    assert 0 not in heap
    assert len(heap) == 1
    assert heap.peek() == (2.0, 1)
    heap.set(0, 1.0)  # re-added with its old key: the old entry must not resurface twice
    assert drain(heap) == [0, 1]


def test_compaction_keeps_memory_bounded_and_order_correct() -> None:
    heap = LazyHeap()
    for tid in range(5):
        heap.set(tid, float(tid))
    for step in range(2000):  # churn one table's key: 2000 stale entries without compaction
        heap.set(2, 10.0 + step)
        assert len(heap._heap) <= 64 + 4 * len(heap)
    assert len(heap) == 5
    heap.set(2, 2.5)
    assert heap.peek() == (0.0, 0)
    assert drain(heap) == [0, 1, 2, 3, 4]


def test_compaction_after_removals() -> None:
    heap = LazyHeap()
    for tid in range(100):
        heap.set(tid, float(-tid))
    for tid in range(0, 100, 2):
        heap.set(tid, None)
    for step in range(500):  # enough pushes to trigger rebuilds while half the tables are gone
        heap.set(1, float(step))
        assert len(heap._heap) <= 64 + 4 * 50
    assert len(heap) == 50
    # Odd tables keyed -tid (99 first, down to 3); table 1 last with key 499.
    assert drain(heap) == list(range(99, 1, -2)) + [1]
    assert heap._heap == []  # popping through stale entries leaves nothing behind


# -- model-based ------------------------------------------------------------------------------

TIDS = st.integers(0, 5)
KEYS = st.one_of(st.none(), st.integers(0, 6).map(float))


def reference_min(model: dict[int, float]) -> tuple[float, int] | None:
    return min(((key, tid) for tid, key in model.items()), default=None)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), TIDS, KEYS),
        st.tuples(st.just("pop"), st.none(), st.none()),
        st.tuples(st.just("peek"), st.none(), st.none()),
    ),
    max_size=400,
)


@settings(max_examples=examples(60))
@given(ops=OPS)
def test_matches_dict_reference(ops: list[tuple[str, int | None, float | None]]) -> None:
    heap = LazyHeap()
    model: dict[int, float] = {}
    high_water = 0  # removals do not compact; the bound holds for the most tables ever live
    for op, tid, key in ops:
        if op == "set":
            assert tid is not None
            heap.set(tid, key)
            if key is None:
                model.pop(tid, None)
            else:
                model[tid] = key
        elif op == "pop":
            expected = reference_min(model)
            got = heap.pop()
            if expected is None:
                assert got is None
            else:
                assert got == expected[1]
                del model[got]
        else:
            assert heap.peek() == reference_min(model)
        assert len(heap) == len(model)
        for t in range(6):
            assert (t in heap) == (t in model)
        high_water = max(high_water, len(model))
        assert len(heap._heap) <= 64 + 4 * high_water  # compaction bounds memory


class LazyHeapMachine(RuleBasedStateMachine):
    """The same reference model, driven statefully (hypothesis shrinks to a minimal run)."""

    def __init__(self) -> None:
        super().__init__()
        self.heap = LazyHeap()
        self.model: dict[int, tuple[int, int]] = {}
        self.high_water = 0

    @rule(tid=st.integers(0, 9), key=st.tuples(st.integers(0, 3), st.integers(0, 3)))
    def set_key(self, tid: int, key: tuple[int, int]) -> None:
        self.heap.set(tid, key)
        self.model[tid] = key

    @rule(tid=st.integers(0, 9))
    def remove(self, tid: int) -> None:
        self.heap.set(tid, None)
        self.model.pop(tid, None)

    @rule()
    def pop(self) -> None:
        expected = min(((k, t) for t, k in self.model.items()), default=None)
        got = self.heap.pop()
        assert got == (None if expected is None else expected[1])
        if got is not None:
            del self.model[got]

    @precondition(lambda self: bool(self.model))
    @rule()
    def peek(self) -> None:
        assert self.heap.peek() == min((k, t) for t, k in self.model.items())

    @invariant()
    def sizes_agree(self) -> None:
        assert len(self.heap) == len(self.model)
        self.high_water = max(self.high_water, len(self.model))
        assert len(self.heap._heap) <= 64 + 4 * self.high_water


TestLazyHeapMachine = LazyHeapMachine.TestCase
TestLazyHeapMachine.settings = settings(max_examples=examples(25), stateful_step_count=80)
