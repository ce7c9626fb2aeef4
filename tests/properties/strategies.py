"""Hypothesis strategies shared by the property tests: arrays as a dataset key may hold them
(valid, near misses and hostile), env ids as a file may name them, hostile text, JSON.

A generated input is valid but for the parts ``spoiled_parts`` draws: each part's strategy
takes ``spoil`` and draws a valid value, or (spoiled) a near miss or a hostile one. A test
asserts success when no part is spoiled, and the contract alone otherwise; shrinking aims
at an input with fewer spoiled parts, so a failure's minimal example names the part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium
import h5py
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.properties.hdf5_files import (
    OUTSIDE,
    Array,
    Declared,
    Empty,
    ExternalLink,
    ExternalStorage,
    Group,
    Missing,
    Reference,
    SoftLink,
    Strings,
    Virtual,
)

FLOAT_DTYPES = ("<f2", "<f4", "<f8")
INT_DTYPES = ("<i1", "<i2", "<i4", "<i8", "<u1", "<u2", "<u4", "<u8")
EXOTIC_DTYPES = ("?", "<c8", "<c16", "S3", "<f16")
COMPOUND = np.dtype([("x", "<f4"), ("y", "<i2")])
SUBARRAY = np.dtype(("<f4", (2,)))
MEMORY_PROOF_ROWS = 10**12  # declared rows no machine holds, even at one byte each

# Text a hostile file or command line may hold: control characters, NUL, line and
# paragraph separators, terminal escapes, YAML and shell look-alikes, paths out of bounds.
HOSTILE_TEXT = ("", " ", "\x00", "a\x00b", "\n", "x\ny", "\r", "\x1b[31mred", "\u2028", "\x85",
                "\x0b", "\x1c", "\t", "é", "😀", "\udcff", "~", "-", "--", "=", "==", "*", "?",
                "..", "/dev/null", "/etc/passwd", "/proc/self/mem",
                "!!python/object/apply:os.system ['true']", "{a: 1}", "[1, 2", "*alias",
                "&anchor x", "? key", "%TAG ! x", "1e309", "nan", "-inf", "0x10", "1:30", "0o17",
                "1_000", "true", "null", "$(touch PWNED)", "`id`", "%s%n", "{0}", "C:\\x",
                "\\\\server\\share")
# Long text, as (unit, count): a name past NAME_MAX, a path past PATH_MAX, a long value.
LONG_TEXT = (("x", 300), ("../", 40), ("a/", 2100), ("x", 5000), ("/a", 150))


def long_text() -> st.SearchStrategy[str]:
    """One of ``LONG_TEXT``, built when drawn (a failure's report shows it, not the table)."""
    return st.sampled_from(LONG_TEXT).map(lambda unit_count: unit_count[0] * unit_count[1])


# Paths the OS refuses or that lead nowhere good: NUL, a byte that is not UTF-8, names past
# NAME_MAX and PATH_MAX, a path through a file, link loops, special files.
HOSTILE_PATHS = ("a\x00b", "\x00", "a\x00.hdf5", "\x00.yaml", "\udcff", "\udcff.hdf5",
                 "notes.txt/x", "notes.txt/x.hdf5", "notes.txt/x.yaml", "loop.hdf5", "loop.yaml",
                 "loop/x", "/dev/null", "/dev/zero.yaml", "/proc/self/mem", "/etc/passwd",
                 "/etc/passwd.hdf5", "/", ".", "..", "~", "-", "dir.mp4")


def hostile_paths() -> st.SearchStrategy[str]:
    """A hostile path (see ``HOSTILE_PATHS``), a long one, or one with a dataset or suite
    suffix past the OS's limits."""
    return st.one_of(st.sampled_from(HOSTILE_PATHS), long_text(),
                     long_text().map(lambda text: text + ".hdf5"),
                     long_text().map(lambda text: text + ".yaml"))


def hostile_text() -> st.SearchStrategy[str]:
    """Short arbitrary text (any code point but surrogates), long text, or a known hostile
    string."""
    return st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=24), long_text())


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """JSON values as Python parses them: huge integers and non-finite floats included."""
    leaves = st.one_of(st.none(), st.booleans(), st.integers(),
                       st.integers(300, 400).map(lambda digits: 10**digits), st.floats(),
                       hostile_text())
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(hostile_text(), inner, max_size=4)),
        max_leaves=max_leaves)


def yaml_values(max_leaves: int = 10) -> st.SearchStrategy[Any]:
    """Values ``yaml.safe_dump`` writes: scalars of every YAML type, lists and mappings."""
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), hostile_text(),
                       st.sampled_from([0, -3, 10**9, 10**30, 1e3, "abc", "1e3", "true"]))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(hostile_text(), st.integers()),
                                                     inner, max_size=4)),
        max_leaves=max_leaves)


def near_misses(word: str) -> st.SearchStrategy[str]:
    """``word`` as a hand types it wrong: a letter dropped, doubled or swapped, the case
    or a separator changed, a plural, a space around it."""
    if not word:
        return st.just(word)
    last = len(word) - 1
    return st.one_of(
        st.integers(0, last).map(lambda i: word[:i] + word[i + 1:]),
        st.integers(0, last).map(lambda i: word[:i] + word[i] + word[i:]),
        st.integers(0, max(last - 1, 0)).map(lambda i: word[:i] + word[i + 1:i + 2]
                                             + word[i:i + 1] + word[i + 2:]),
        st.sampled_from([word.upper(), word.capitalize(), word.replace("_", "-"),
                         word.replace(".", "_"), word.replace("-", "_"), f"{word}s",
                         word.rstrip("s"), f" {word}", f"{word} ", f"{word}\n"]))


def _width(dtype: str) -> int:
    """The bits of a float dtype, as ``st.floats(width=...)`` takes them."""
    return np.dtype(dtype).itemsize * 8


def finite_floats(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """Float arrays of ``shape`` with small finite values, in each float width."""
    return st.sampled_from(FLOAT_DTYPES).flatmap(lambda dtype: hnp.arrays(
        dtype, shape, elements=st.floats(-1000, 1000, width=_width(dtype))))


def zero_one(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """Flags as a file may store them: booleans, or 0 and 1 as integers or floats."""
    return st.sampled_from(("?", "<i1", "<u1", "<i8", "<f4", "<f8")).flatmap(
        lambda dtype: hnp.arrays(dtype, shape, elements=st.sampled_from([0, 1]).map(
            lambda v: np.array(v).astype(dtype).item())))


def any_dtype_array(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``shape`` in any dtype h5py writes, with any values numpy allows."""
    plain = st.sampled_from(FLOAT_DTYPES + INT_DTYPES + EXOTIC_DTYPES).flatmap(
        lambda dtype: hnp.arrays(dtype, shape))
    fixed = st.sampled_from([COMPOUND, SUBARRAY, np.dtype("V4")]).map(
        lambda dtype: np.zeros(shape, dtype=dtype))
    return st.one_of(plain, fixed)


def with_special_value(values: np.ndarray) -> st.SearchStrategy[np.ndarray]:
    """``values`` as floats with one entry NaN, an infinity, the largest float, or 2."""
    if values.size == 0:
        return st.just(values.astype(np.float64))
    specials = st.sampled_from([math.nan, math.inf, -math.inf, 2.0, -1.0, 0.5, 1e300, -1e300,
                                float(np.finfo(np.float32).max), 65504.0])

    def spoil(index: int, value: float, dtype: str) -> np.ndarray:
        spoiled = values.astype(dtype)
        with np.errstate(over="ignore"):
            spoiled.flat[index] = np.array(value).astype(dtype)
        return spoiled

    return st.builds(spoil, st.integers(0, values.size - 1), specials,
                     st.sampled_from(FLOAT_DTYPES))


def other_shapes(rows: int) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes a key should not have: 0-d, other ranks, other row counts, 0 or 1 row."""
    return st.one_of(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                     st.tuples(st.integers(0, 6).map(lambda r: r if r < rows else r + 1)),
                     st.tuples(st.integers(0, 7), st.integers(0, 5)))


def links_and_storage(rows: int) -> st.SearchStrategy[Any]:
    """What reaches outside the file or beyond memory, or is not an array at all."""
    shape = (max(rows, 1), 3)
    return st.one_of(
        st.sampled_from([SoftLink("/elsewhere"), SoftLink("/nowhere"), SoftLink("/"),
                         ExternalLink(OUTSIDE), ExternalLink("sibling", "/x"),
                         ExternalLink("/nonexistent/file.h5", "/x"),
                         ExternalStorage(shape), Virtual(shape), Missing(), Empty(),
                         Reference(), Group(), Group({"inner": Array(np.zeros(3))})]),
        st.builds(Declared, st.sampled_from([(10**10,), (10**10, 3), (10**10, 3, 2)]),
                  st.sampled_from(["<f4", "<f8", "u1", "?"])),
        st.builds(Declared, st.sampled_from([(MEMORY_PROOF_ROWS,), (MEMORY_PROOF_ROWS, 3)]),
                  st.sampled_from(["<f4", "u1"]), st.just(True)),
        st.lists(hostile_text(), min_size=0, max_size=rows + 1).map(
            lambda texts: Strings(tuple(texts))),
    )


def member(rows: int, columns: tuple[int, ...], kind: str, spoil: bool
           ) -> st.SearchStrategy[Any]:
    """What an array key of ``rows`` rows holds: ``kind`` is ``float`` (columns of floats),
    ``reward`` ((N,) or (N, 1) floats) or ``flag`` ((N,) or (N, 1) 0/1); with ``spoil``,
    another dtype, a special value, another shape, a link or a declared size."""
    if kind == "flag":
        good = st.sampled_from([(rows,), (rows, 1)]).flatmap(zero_one)
    elif kind == "reward":
        good = st.sampled_from([(rows,), (rows, 1)]).flatmap(finite_floats)
    else:
        good = finite_floats((rows, *columns))
    if not spoil:
        return good.map(Array)
    return st.one_of(
        any_dtype_array((rows, *columns)).map(Array),
        good.flatmap(with_special_value).map(Array),
        other_shapes(rows).flatmap(finite_floats).map(Array),
        links_and_storage(rows),
    )


@dataclass(frozen=True)
class EnvId:
    """An env id as a file stores it, and the top-level modules it names
    (``module:EnvId``), none of which may be imported."""

    value: Any
    modules: frozenset[str] = frozenset()


def _module_id(module: str, env: str) -> EnvId:
    """``module:env``, naming ``module``'s top-level package as one not to import."""
    return EnvId(f"{module}:{env}", frozenset({module.partition(".")[0]}))


OTHER_ENVS = ("CartPole-v1", "CartPole-v0", "Hopper-v5", "HalfCheetah-v5", "Pendulum-v0",
              "dmc:cartpole-balance", "dmc:nothing-here", "Blackjack-v1", "FrozenLake-v1",
              "phys2d/Pendulum-v0", "GymV21Environment-v0", "Ant-v2", "pendulum-v1",
              " Pendulum-v1", "Pendulum-v1 ", "Pendulum-v1\n", "ns/Pendulum-v1", ":Pendulum-v1",
              "Pendulum-v1:", "dmc:", "x" * 201, "Pendulum-v1\x00")


def registered_envs() -> st.SearchStrategy[str]:
    """Any id gymnasium registers (old versions, missing dependencies, Tuple and Discrete
    observations included) or a dm_control one."""
    return st.sampled_from([*sorted(gymnasium.registry), "dmc:cartpole-balance",
                            "dmc:humanoid-run", "dmc:nothing-here"])


def env_ids(attacker: str, spoil: bool) -> st.SearchStrategy[EnvId]:
    """Pendulum-v1; with ``spoil``, other envs, random text, ``module:EnvId`` forms naming
    the attacker's module, ``this`` or a module that does not exist, and values that are
    not text."""
    if not spoil:
        return st.just(EnvId("Pendulum-v1"))
    generated = st.from_regex(r"rlbench_prop_[a-z]{1,6}", fullmatch=True)
    return st.one_of(
        st.one_of(st.sampled_from(OTHER_ENVS), registered_envs(), hostile_text()).map(EnvId),
        st.builds(_module_id, st.sampled_from([attacker, "this", f"{attacker}.sub"]),
                  st.sampled_from(["Pendulum-v1", "Evil-v0", "", "CartPole-v1"])),
        st.builds(_module_id, generated, st.sampled_from(["Pendulum-v1", "X"])),
        st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(), st.booleans(),
                  st.binary(max_size=12), st.just(np.array([1.0, 2.0])),
                  st.just(np.array(["Pendulum-v1"], dtype="S")), st.just(1 + 2j),
                  st.just(h5py.Empty("f4"))).map(EnvId),
    )


def reference_scores(spoil: bool, huge_ints: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Reference scores: none, two distinct finite numbers or one alone; with ``spoil``,
    values that are not two distinct finite numbers (``huge_ints``: integers past any
    float, as JSON holds them and HDF5 attributes cannot)."""
    number = st.floats(-1e6, 1e6)
    if not spoil:
        return st.one_of(
            st.just({}),
            st.tuples(number, st.floats(1, 1e6)).map(
                lambda p: {"ref_min_score": p[0], "ref_max_score": p[0] + p[1]}),
            st.tuples(st.sampled_from(["ref_min_score", "ref_max_score"]), number).map(
                lambda p: {p[0]: p[1]}),
        )
    hostile = st.one_of(number, st.integers(-2**63, 2**63 - 1), st.just(math.nan),
                        st.just(math.inf), st.booleans(), hostile_text(), st.binary(max_size=6),
                        st.just(np.array([1.0, 2.0])), st.just(1j))
    names = st.sampled_from(["ref_min_score", "ref_max_score"])
    huge = st.integers(309, 400).map(lambda digits: 10**digits) if huge_ints else hostile
    return st.one_of(
        number.map(lambda v: {"ref_min_score": v, "ref_max_score": v}),
        st.dictionaries(names, hostile, min_size=1),
        st.dictionaries(names, huge, min_size=1),
    )


def spoiled_parts(parts: list[str], most: int = 2) -> st.SearchStrategy[frozenset[str]]:
    """Which parts of a generated input are drawn spoiled: none (a valid input, which
    shrinking aims for), one or two."""
    return st.sets(st.sampled_from(parts), max_size=most).map(frozenset)
