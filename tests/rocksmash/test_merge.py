"""The run-at-a-time merge against a naive model: newest source wins, deletions dropped,
both directions, any chunking."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from rocksmash.merge import merge_forward, merge_reverse

SOURCE = st.dictionaries(st.binary(max_size=3), st.one_of(st.none(), st.binary(max_size=3)),
                         max_size=30)


def chunks(d: dict, sizes, reverse: bool):
    keys = sorted(d)
    out, i = [], 0
    for n in sizes:
        if i >= len(keys):
            break
        part = keys[i:i + n]
        out.append((part, [d[k] for k in part]))
        i += n
    if i < len(keys):
        out.append((keys[i:], [d[k] for k in keys[i:]]))
    out.append(([], []))  # empty chunks are allowed anywhere
    return iter(out[::-1] if reverse else out)


@given(st.lists(SOURCE, max_size=5), st.lists(st.integers(1, 7), max_size=10))
def test_merge_matches_model(sources, sizes):
    model: dict = {}
    for d in reversed(sources):  # older sources first, newer ones overwrite
        model.update(d)
    expected = sorted((k, v) for k, v in model.items() if v is not None)
    assert list(merge_forward([chunks(d, sizes, False) for d in sources])[0]) == expected
    assert list(merge_reverse([chunks(d, sizes, True) for d in sources])[0]) == expected[::-1]


@given(SOURCE, SOURCE, st.lists(st.integers(1, 7), max_size=10))
def test_two_source_merge_matches_model(newer, older, sizes):
    """Two sources take their own path (merge._forward_two): the same model."""
    expected = sorted((k, v) for k, v in {**older, **newer}.items() if v is not None)
    assert list(merge_forward([chunks(newer, sizes, False), chunks(older, sizes, False)])[0]) \
        == expected
