"""The few seconds of memory in front of authentication's reads (cache.py): a value is
read once while fresh, an absent one is never kept (a flood of made-up keys cannot
fill the cache), and the least recently used entry goes first."""

from __future__ import annotations

from collections import Counter

from gpucloud_gateway.cache import TtlCache


class Source:
    """What the cache reads through: a dict, counting the reads per key."""

    def __init__(self, **values: object) -> None:
        self.values: dict[str, object] = dict(values)
        self.reads: Counter[str] = Counter()

    async def load(self, key: str) -> object:
        self.reads[key] += 1
        return self.values.get(key)


async def test_a_fresh_value_is_read_once() -> None:
    source, cache = Source(a="alpha"), TtlCache[str, object](60)
    assert [await cache.get("a", source.load) for _ in range(5)] == ["alpha"] * 5
    assert source.reads["a"] == 1


async def test_a_stale_value_is_read_again() -> None:
    source, cache = Source(a="alpha"), TtlCache[str, object](0)
    await cache.get("a", source.load)
    source.values["a"] = "beta"  # changed at the source, e.g. a key revoked
    assert await cache.get("a", source.load) == "beta"
    assert source.reads["a"] == 2


async def test_an_absent_value_is_never_kept() -> None:
    source, cache = Source(), TtlCache[str, object](60)
    for _ in range(3):
        assert await cache.get("gpc_made_up", source.load) is None
    assert source.reads["gpc_made_up"] == 3
    source.values["gpc_made_up"] = "created since"
    assert await cache.get("gpc_made_up", source.load) == "created since"


async def test_a_value_gone_at_the_source_is_dropped_when_next_read() -> None:
    source, cache = Source(a="alpha"), TtlCache[str, object](0)
    await cache.get("a", source.load)
    del source.values["a"]
    assert await cache.get("a", source.load) is None
    source.values["a"] = "back"
    assert await cache.get("a", source.load) == "back"


async def test_falsy_values_are_values_and_kept() -> None:
    source, cache = Source(zero=0, empty="", none_of_them=[]), TtlCache[str, object](60)
    for key in ("zero", "empty", "none_of_them"):
        first = await cache.get(key, source.load)
        assert await cache.get(key, source.load) == first
    assert set(source.reads.values()) == {1}


async def test_a_forgotten_key_is_read_again_at_once() -> None:
    source, cache = Source(a="alpha"), TtlCache[str, object](60)
    await cache.get("a", source.load)
    source.values["a"] = "beta"
    cache.forget("a")
    cache.forget("never-cached")  # nothing to forget: no error
    assert await cache.get("a", source.load) == "beta"


async def test_a_full_cache_drops_its_least_recently_used_entry() -> None:
    source = Source(a="alpha", b="beta", c="gamma")
    cache = TtlCache[str, object](60, max_entries=2)
    await cache.get("a", source.load)
    await cache.get("b", source.load)
    await cache.get("a", source.load)  # a used again: b is now the oldest
    await cache.get("c", source.load)  # full: b goes
    await cache.get("a", source.load)
    await cache.get("c", source.load)
    assert source.reads == Counter({"a": 1, "b": 1, "c": 1})
    await cache.get("b", source.load)
    assert source.reads["b"] == 2


async def test_absent_values_push_nothing_out() -> None:
    source = Source(a="alpha")
    cache = TtlCache[str, object](60, max_entries=1)
    await cache.get("a", source.load)
    for n in range(100):
        await cache.get(f"gpc_flood_{n}", source.load)
    await cache.get("a", source.load)
    assert source.reads["a"] == 1
