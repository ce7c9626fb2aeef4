"""Minari dataset directories are untrusted input: for any ``metadata.json`` and any
``main_data.hdf5``, ``rlbench dataset info <dir>`` holds the command's contract (see
``contract``) and ``load_dataset`` raises nothing but ``ConfigError``; a valid Pendulum-v1
dataset loads and prints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from tests.properties.hdf5_files import MinariDataset, MinariEpisode, minari_metadata
from tests.properties.strategies import (
    EnvId,
    env_ids,
    hostile_text,
    json_values,
    member,
    reference_scores,
    spoiled_parts,
)

OBS, ACT = 3, 1  # Pendulum-v1's sizes
VERSIONS = ("0.5.4", "0.4.3", "0.5", "0.5.x", "0.6.0", "1.0.0", "0.3.0", "5", "", ".", "0..5")
METADATA_KEYS = ("dataset_id", "algorithm_name", "author", "code_permalink", "description",
                 "total_episodes", "total_steps", "num_episodes_average_score", "data_format",
                 "observation_space", "action_space", "minari_version")


@dataclass(frozen=True)
class MinariCase:
    """A generated dataset directory, whether it is certainly valid, the modules it names."""

    dataset: MinariDataset
    valid: bool
    modules: frozenset[str]


def _env_spec(env: EnvId, entry_point: str, spoil: bool) -> st.SearchStrategy[Any]:
    """``env_spec`` as Minari stores it (JSON text holding an object with an ``id``); with
    ``spoil``, the object itself, another JSON value, text, or nesting past the parser's
    depth. Its entry point and kwargs name a module that must never be imported."""
    spec = {"id": env.value, "entry_point": f"{entry_point}:Evil",
            "kwargs": {"module": entry_point}}
    as_text = json.dumps(spec, default=repr)
    if not spoil:
        return st.just(as_text)
    return st.one_of(
        st.just(spec if isinstance(env.value, str) else as_text),
        json_values().map(json.dumps),
        hostile_text(),
        st.integers(1, 3000).map(lambda depth: "[" * depth + "]" * depth),
    )


def _raw_metadata() -> st.SearchStrategy[Any]:
    """metadata.json that is not Minari's object: any JSON value, or bytes (not UTF-8,
    not JSON, nested past the parser's depth)."""
    return st.one_of(
        json_values(),
        st.binary(max_size=64),
        st.integers(1, 200_000).map(lambda depth: b"[" * depth + b"]" * depth),
        st.just(b"\xff\xfe{}"),
    )


@st.composite
def metadata(draw: st.DrawFn, attacker: str, spoiled: frozenset[str]
             ) -> tuple[Any, frozenset[str]]:
    """``(metadata, modules named)``: Minari's metadata with generated extra fields, its
    env spec, version and reference scores drawn valid or (when ``spoiled`` names them)
    not; or (``metadata`` spoiled) not Minari's metadata at all."""
    if "metadata" in spoiled:
        return draw(_raw_metadata()), frozenset()
    env: EnvId = draw(env_ids(attacker, "env" in spoiled))
    spec = draw(_env_spec(env, attacker, "env_spec" in spoiled))
    scores = draw(reference_scores("refs" in spoiled, huge_ints=True))
    versions = st.one_of(st.sampled_from(VERSIONS), json_values(max_leaves=2)) \
        if "version" in spoiled else st.sampled_from(VERSIONS[:2])
    extra = draw(st.dictionaries(st.sampled_from(METADATA_KEYS[:8]), json_values(), max_size=3))
    spec_key = draw(st.sampled_from(["env_spec", "eval_env_spec"]))
    base = {**minari_metadata(), **extra, spec_key: spec, "minari_version": draw(versions),
            **scores}
    return base, env.modules


EPISODE_KEYS = (("observations", 1, (OBS,), "float"), ("actions", 0, (ACT,), "float"),
                ("rewards", 0, (), "reward"), ("terminations", 0, (), "flag"),
                ("truncations", 0, (), "flag"))


def _episode_parts(number: int) -> list[str]:
    """The parts of episode ``number`` that can be spoiled: its name, its step count, its
    observation size and each of its arrays."""
    parts = ("name", "steps", "size", *(key for key, *_ in EPISODE_KEYS))
    return [f"{number}.{part}" for part in parts]


@st.composite
def episode(draw: st.DrawFn, number: int, spoiled: frozenset[str]) -> MinariEpisode:
    """An episode group: ``episode_<number>`` with its five arrays for 1 to 4 steps; the
    parts ``spoiled`` names (``<number>.<part>``) drawn otherwise: a near-miss name, 0
    steps, observations of another size, an array near valid or hostile."""
    def spoils(part: str) -> bool:
        return f"{number}.{part}" in spoiled

    steps = draw(st.integers(0, 4) if spoils("steps") else st.integers(1, 4))
    obs = draw(st.sampled_from([2, 4, 11])) if spoils("size") else OBS
    members = {}
    for key, extra_row, columns, kind in EPISODE_KEYS:
        columns = (obs,) if key == "observations" else columns
        members[key] = draw(member(steps + extra_row, columns, kind, spoils(key)))
    name = draw(st.sampled_from(
        [f"episode_0{number}", f"episode_{number}x", f"episode_-{number}", f"Episode_{number}",
         f"episode_{number}{'0' * 30}", f"episode_{number}\n", f"other_{number}"])
        if spoils("name") else st.just(f"episode_{number}"))
    return MinariEpisode(name, members)


LAYOUTS = ("data", "flat", "no-main", "main-not-hdf5")
PARTS = ["metadata", "env", "env_spec", "refs", "version", "layout", "count",
         *_episode_parts(0), *_episode_parts(1)]


@st.composite
def minari_cases(draw: st.DrawFn, attacker: str) -> MinariCase:
    """A Minari dataset of Pendulum-v1 with up to two of its parts drawn near valid or
    hostile (see ``PARTS``)."""
    spoiled = draw(spoiled_parts(PARTS))
    meta, modules = draw(metadata(attacker, spoiled))
    count = draw(st.integers(0, 3) if "count" in spoiled else st.integers(1, 2))
    episodes = tuple(draw(episode(number, spoiled)) for number in range(count))
    layout = draw(st.sampled_from(LAYOUTS if "layout" in spoiled else LAYOUTS[:2]))
    return MinariCase(MinariDataset(meta, episodes, layout), not spoiled, modules)


@pytest.mark.slow
@for_target("minari")
@given(data=st.data())
def test_any_minari_directory_holds_the_contract(data: st.DataObject, scratch: Path,
                                                 temp_root: Path, attacker: Attacker) -> None:
    """``dataset info`` of any directory holds the contract, and a valid one prints; the
    env spec's id, entry point and kwargs never get a module imported."""
    case = data.draw(minari_cases(attacker.module), label="case")
    forbidden = attacker.forbidden | case.modules
    with example_dir(scratch) as here:
        path = case.dataset.write(here / "dataset")
        outcome = check_cli(["dataset", "info", str(path)], watch=[temp_root],
                            forbidden_modules=forbidden, markers=[attacker.marker])
        event(f"exit {outcome.code}")
        if case.valid:
            assert outcome.code == 0, outcome.describe()
            assert "Pendulum-v1" in outcome.out, outcome.describe()
        check_load_dataset(path, forbidden, [attacker.marker])
