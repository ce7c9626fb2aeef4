"""D4RL-format HDF5 files are untrusted input: for any file, ``rlbench dataset info <file>``
holds the command's contract (see ``contract``) and ``load_dataset`` raises nothing but
``ConfigError``; a valid Pendulum-v1 file loads and prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.properties.contract import (
    Attacker,
    check_cli,
    check_load_dataset,
    example_dir,
    for_target,
)
from tests.properties.hdf5_files import Array, D4rlFile, Empty, Strings, Text
from tests.properties.strategies import (
    EnvId,
    any_dtype_array,
    env_ids,
    hostile_text,
    links_and_storage,
    member,
    reference_scores,
    spoiled_parts,
)

OBS, ACT = 3, 1  # Pendulum-v1's sizes
NAMES = ("pendulum_prop-v0", "x")  # hopper and ant names: D4RL envs of another size
SUFFIXES = (".hdf5", ".h5", ".HDF5", ".txt", "")


@dataclass(frozen=True)
class D4rlCase:
    """A generated file, its name, whether it is certainly valid, the modules it names."""

    file: D4rlFile
    name: str
    valid: bool
    modules: frozenset[str]


def _metadata(spoil: bool) -> st.SearchStrategy[dict[str, Any]]:
    """``metadata/`` entries: small or large arrays of any dtype and text; with ``spoil``,
    links, declared sizes and groups among them."""
    plain = st.one_of(
        st.integers(0, 80).flatmap(lambda size: any_dtype_array((size,))).map(Array),
        st.lists(hostile_text(), max_size=3).map(lambda texts: Strings(tuple(texts))))
    names = st.from_regex(r"m_[a-z]{1,4}", fullmatch=True)
    if not spoil:
        return st.dictionaries(names, plain, max_size=3)
    return st.dictionaries(names, st.one_of(plain, links_and_storage(2)), min_size=1,
                           max_size=3)


KEYS = (("observations", (OBS,), "float"), ("actions", (ACT,), "float"),
        ("rewards", (), "reward"), ("terminals", (), "flag"))
OPTIONAL_KEYS = (("timeouts", (), "flag"), ("next_observations", (OBS,), "float"))
PARTS = [key for key, _, _ in KEYS + OPTIONAL_KEYS] + ["env", "metadata", "refs", "name"]


@st.composite
def d4rl_cases(draw: st.DrawFn, attacker: str) -> D4rlCase:
    """A D4RL file for Pendulum-v1 with up to two of its parts (a key, the env id, the
    metadata, the reference scores, the file name) drawn near valid or hostile."""
    spoiled = draw(spoiled_parts(PARTS))
    rows = draw(st.integers(0, 5))
    members = {}
    for key, columns, kind in KEYS:
        members[key] = draw(member(rows, columns, kind, key in spoiled))
    for key, columns, kind in OPTIONAL_KEYS:
        if key in spoiled or draw(st.booleans()):
            members[key] = draw(member(rows, columns, kind, key in spoiled))
    env: EnvId = draw(env_ids(attacker, "env" in spoiled))
    where = draw(st.sampled_from(["attrs", "metadata", "both", "none"] if "env" in spoiled
                                 else ["attrs", "metadata", "both"]))
    metadata = draw(_metadata("metadata" in spoiled))
    attrs = draw(reference_scores("refs" in spoiled))
    if where in ("attrs", "both"):
        attrs = {**attrs, "env_id": env.value}
    if where in ("metadata", "both"):
        metadata = {**metadata, "env_id": _as_member(env.value)}
    names = (*NAMES, "hopper_medium-v2", "ant_expert-v2") if "name" in spoiled else NAMES
    suffixes = SUFFIXES if "name" in spoiled else SUFFIXES[:2]
    name = draw(st.sampled_from(names)) + draw(st.sampled_from(suffixes))
    return D4rlCase(D4rlFile(members, metadata, attrs), name, not spoiled, env.modules)


def _as_member(value: Any) -> Any:
    """An env id as a ``metadata/env_id`` dataset."""
    if isinstance(value, str):
        return Text(value)
    if isinstance(value, h5py.Empty):
        return Empty()
    if isinstance(value, np.ndarray | bytes | int | float | bool | complex):
        return Array(np.asarray(value))
    return value


@pytest.mark.slow
@for_target("d4rl")
@given(data=st.data())
def test_any_d4rl_file_holds_the_contract(data: st.DataObject, scratch: Path,
                                          temp_root: Path, attacker: Attacker) -> None:
    """``dataset info`` of any file holds the contract, and a valid one prints; an env id
    the file names in ``module:EnvId`` form never gets its module imported."""
    case = data.draw(d4rl_cases(attacker.module), label="case")
    forbidden = attacker.forbidden | case.modules
    with example_dir(scratch) as here:
        path = case.file.write(here / case.name)
        outcome = check_cli(["dataset", "info", str(path)], watch=[temp_root],
                            forbidden_modules=forbidden, markers=[attacker.marker])
        event(f"exit {outcome.code}")
        if case.valid:
            assert outcome.code == 0, outcome.describe()
            assert "Pendulum-v1" in outcome.out, outcome.describe()
        check_load_dataset(path, forbidden, [attacker.marker])
