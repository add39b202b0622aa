"""Key hashes: golden values, scalar vs. independent references, and vectorised vs. scalar."""

from __future__ import annotations

from collections.abc import Sequence

import mmh3
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import InvalidConfiguration
from broker_core.hashing import (
    HashingScheme,
    hash_keys,
    java_string_hash,
    java_string_hash_array,
    murmur3_32_hash,
    murmur3_32_hash_array,
    murmur3_32_unsigned,
    sticky_key_hash,
    sticky_key_hash_array,
)
from broker_core.hashing import columns as hashing_columns

# Any code point, lone surrogates included (a Python str may hold them; Java strings can too).
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
# What an Arrow string column can hold: valid Unicode, mixing ASCII, accented and astral characters.
ARROW_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
ASCII_TEXT = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=40)
KEY_LISTS = st.lists(st.one_of(st.none(), ARROW_TEXT, ASCII_TEXT, st.sampled_from(["", "k", "Order-1"])))


def reference_java_hash(text: str) -> int:
    """Java's definition, sum(s[i] * 31**(n-1-i)) over UTF-16 code units mod 2**32, with Python ints."""
    raw = text.encode("utf-16-le", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "little") for i in range(0, len(raw), 2)]
    total = sum(unit * 31 ** (len(units) - 1 - i) for i, unit in enumerate(units))
    return (total % 2**32) & 0x7FFFFFFF


def reference_murmur(data: str | bytes) -> int:
    return mmh3.hash(data, 0, signed=False) & 0x7FFFFFFF


# --- golden values --------------------------------------------------------------------------------


def test_pulsar_docs_key_shared_example() -> None:
    assert murmur3_32_unsigned("Order-3459134") == 3112179635
    assert 3112179635 % 65536 == 6067
    assert murmur3_32_hash("Order-3459134") == 3112179635 & 0x7FFFFFFF
    assert murmur3_32_hash("Order-3459134") % 65536 == 6067
    assert sticky_key_hash(None, "Order-3459134") % 65536 == 6067


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 97), ("hello", 99162322), ("Order-3459134", reference_java_hash("Order-3459134"))],
)
def test_java_hash_golden(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected
    assert java_string_hash_array(pa.array([text])).to_pylist() == [expected]


def test_java_hash_masks_negative_int_to_31_bits() -> None:
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE in Java; masked it becomes 0.
    assert java_string_hash("polygenelubricants") == 0
    assert reference_java_hash("polygenelubricants") == 0


def test_surrogates_follow_java() -> None:
    astral = "\U0001f600"
    # Java sees U+1F600 as the two code units D83D DE00.
    assert java_string_hash(astral) == (0xD83D * 31 + 0xDE00) & 0x7FFFFFFF
    assert java_string_hash("\ud83d\ude00") == java_string_hash(astral)
    assert murmur3_32_hash("\ud83d\ude00") == murmur3_32_hash(astral)
    # Java's UTF-8 encoder turns a lone surrogate into '?'.
    assert murmur3_32_hash("a\ud800b") == reference_murmur(b"a?b")


def test_sticky_key_precedence() -> None:
    none_key = reference_murmur(b"NONE_KEY")
    assert sticky_key_hash(b"ord", "key") == reference_murmur(b"ord")
    assert sticky_key_hash(b"", "key") == reference_murmur(b"key")
    assert sticky_key_hash(None, "key") == reference_murmur(b"key")
    assert sticky_key_hash(None, None) == none_key
    assert sticky_key_hash(b"", "") == none_key


# --- scalar vs. references ------------------------------------------------------------------------


@given(ANY_TEXT)
def test_scalar_java_matches_reference(text: str) -> None:
    assert java_string_hash(text) == reference_java_hash(text)


@given(st.one_of(ARROW_TEXT, st.binary(max_size=64)))
def test_scalar_murmur_matches_mmh3(data: str | bytes) -> None:
    assert murmur3_32_hash(data) == reference_murmur(data)
    assert murmur3_32_unsigned(data) == mmh3.hash(data, 0, signed=False)


def test_scalar_bad_types() -> None:
    with pytest.raises(InvalidConfiguration):
        java_string_hash(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration):
        murmur3_32_hash(12)  # type: ignore[arg-type]


# --- vectorised vs. scalar ------------------------------------------------------------------------


def expected_java(keys: Sequence[str | None]) -> list[int | None]:
    return [None if key is None else java_string_hash(key) for key in keys]


def expected_murmur(values: Sequence[str | bytes | None]) -> list[int | None]:
    return [None if value is None else murmur3_32_hash(value) for value in values]


@given(KEY_LISTS, st.sampled_from([pa.string(), pa.large_string(), pa.string_view()]))
def test_java_array_matches_scalar(keys: list[str | None], arrow_type: pa.DataType) -> None:
    result = java_string_hash_array(pa.array(keys, type=arrow_type))
    assert result.type == pa.int32()
    assert result.to_pylist() == expected_java(keys)


@given(KEY_LISTS, st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]))
def test_murmur_array_matches_scalar(keys: list[str | None], arrow_type: pa.DataType) -> None:
    values = [None if k is None else (k if pa.types.is_unicode(arrow_type) else k.encode()) for k in keys]
    result = murmur3_32_hash_array(pa.array(values, type=arrow_type))
    assert result.type == pa.int32()
    assert result.to_pylist() == expected_murmur(keys)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=70))))
def test_murmur_array_of_raw_bytes(values: list[bytes | None]) -> None:
    assert murmur3_32_hash_array(pa.array(values, type=pa.binary())).to_pylist() == expected_murmur(values)


@given(KEY_LISTS, st.data())
def test_sliced_arrays(keys: list[str | None], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(keys)))
    stop = data.draw(st.integers(start, len(keys)))
    array = pa.array(keys, type=pa.string()).slice(start, stop - start)
    assert java_string_hash_array(array).to_pylist() == expected_java(keys[start:stop])
    assert murmur3_32_hash_array(array).to_pylist() == expected_murmur(keys[start:stop])


@given(st.lists(KEY_LISTS, max_size=4))
def test_chunked_and_dictionary_arrays(chunks: list[list[str | None]]) -> None:
    flat = [key for chunk in chunks for key in chunk]
    chunked = pa.chunked_array([pa.array(chunk, type=pa.string()) for chunk in chunks], type=pa.string())
    assert java_string_hash_array(chunked).to_pylist() == expected_java(flat)
    assert murmur3_32_hash_array(chunked).to_pylist() == expected_murmur(flat)
    encoded = pc.dictionary_encode(pa.array(flat, type=pa.string()))
    assert java_string_hash_array(encoded).to_pylist() == expected_java(flat)
    assert murmur3_32_hash_array(encoded).to_pylist() == expected_murmur(flat)


@given(KEY_LISTS, st.data())
def test_direct_path_without_dictionary(keys: list[str | None], data: st.DataObject) -> None:
    """Columns judged mostly distinct skip dictionary encoding; that path must agree too."""
    start = data.draw(st.integers(0, len(keys)))
    array = pa.array(keys, type=pa.string()).slice(start)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hashing_columns, "_mostly_distinct", lambda array: True)
        assert java_string_hash_array(array).to_pylist() == expected_java(keys[start:])
        assert murmur3_32_hash_array(array).to_pylist() == expected_murmur(keys[start:])


@pytest.mark.parametrize("num_distinct", [50, 200_000])
def test_large_columns_either_path(num_distinct: int) -> None:
    keys: list[str | None] = [
        f"k-{i % num_distinct}-é" if i % 7 else f"k{i % num_distinct}" for i in range(200_000)
    ]
    keys[::1000] = [None] * len(keys[::1000])
    array = pa.array(keys).slice(3)
    assert hashing_columns._mostly_distinct(array) == (num_distinct > 100_000)
    assert java_string_hash_array(array).to_pylist() == expected_java(keys[3:])
    assert murmur3_32_hash_array(array).to_pylist() == expected_murmur(keys[3:])


def test_long_rows_and_block_boundaries() -> None:
    keys = ["x" * n for n in (0, 1, 3, 4, 5, 8, 1023, 1024, 1025, 5000)] + ["é" * 700, "\U0001f600" * 300]
    array = pa.array(keys + keys[::-1])
    assert java_string_hash_array(array).to_pylist() == expected_java(keys + keys[::-1])
    assert murmur3_32_hash_array(array).to_pylist() == expected_murmur(keys + keys[::-1])


def test_degenerate_columns() -> None:
    assert java_string_hash_array(pa.array([], type=pa.string())).to_pylist() == []
    assert murmur3_32_hash_array(pa.chunked_array([], type=pa.binary())).to_pylist() == []
    assert murmur3_32_hash_array(pa.array([None, None])).to_pylist() == [None, None]
    assert java_string_hash_array(pa.array([None], type=pa.string())).to_pylist() == [None]
    assert java_string_hash_array(pa.array(["", ""])).to_pylist() == [0, 0]


def test_array_bad_inputs() -> None:
    with pytest.raises(InvalidConfiguration, match="string column"):
        java_string_hash_array(pa.array([b"x"]))
    with pytest.raises(InvalidConfiguration, match="string or binary"):
        murmur3_32_hash_array(pa.array([1, 2]))
    with pytest.raises(InvalidConfiguration, match="pyarrow Array"):
        murmur3_32_hash_array(["a", "b"])


# --- sticky keys and dispatch ---------------------------------------------------------------------


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=12)), st.one_of(st.none(), ARROW_TEXT))))
def test_sticky_array_matches_scalar(rows: list[tuple[bytes | None, str | None]]) -> None:
    ordering = pa.array([row[0] for row in rows], type=pa.binary())
    keys = pa.array([row[1] for row in rows], type=pa.string())
    expected = [sticky_key_hash(o, k) for o, k in rows]
    assert sticky_key_hash_array(ordering, keys).to_pylist() == expected
    assert sticky_key_hash_array(None, keys).to_pylist() == [sticky_key_hash(None, k) for _, k in rows]
    assert sticky_key_hash_array(ordering, None).to_pylist() == [sticky_key_hash(o, None) for o, _ in rows]


def test_sticky_array_bad_inputs() -> None:
    with pytest.raises(InvalidConfiguration, match="both are None"):
        sticky_key_hash_array(None, None)
    with pytest.raises(InvalidConfiguration, match="must match"):
        sticky_key_hash_array(pa.array([b"a"]), pa.array(["a", "b"]))
    with pytest.raises(InvalidConfiguration, match="string or binary"):
        sticky_key_hash_array(None, pa.array([1]))


@settings(max_examples=30)
@given(KEY_LISTS)
def test_hash_keys_dispatch(keys: list[str | None]) -> None:
    array = pa.array(keys, type=pa.string())
    assert hash_keys(array, HashingScheme.JavaStringHash).to_pylist() == expected_java(keys)
    assert hash_keys(array, 1).to_pylist() == expected_murmur(keys)
    assert hash_keys(array, "Murmur3_32Hash").to_pylist() == expected_murmur(keys)


def test_hashing_scheme_values_and_unknown_scheme() -> None:
    assert HashingScheme.JavaStringHash == 0
    assert HashingScheme.Murmur3_32Hash == 1
    with pytest.raises(InvalidConfiguration, match="unknown hashing scheme"):
        hash_keys(pa.array(["a"]), 7)
    with pytest.raises(InvalidConfiguration, match="unknown hashing scheme"):
        hash_keys(pa.array(["a"]), "BoostHash")
