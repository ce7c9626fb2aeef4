"""The committed reference stores, read as the reports committed beside them were made from
them: the same runs, the same identities, the same config groups. The older stores were
written by rlbench 0.1.0 to 0.3.0 (the identity in the tag ``config_hash``; the later
offline runs with a ``config_identity`` tag too), the MuJoCo v5 table's and the 100k offline
table's by 0.4.0."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import rlbench.results
from tools.docs.leaderboard import publish_reference_stores

RESULTS = Path(__file__).resolve().parents[3] / "results"
# results/reference/store/<name>.db.gz -> the suite its runs ran in
STORES = {"mujoco": "mujoco", "offline": "offline", "mujoco_v5": "mujoco",
          "offline_hopper_100k": "offline"}
OLDER = ("mujoco", "offline")  # identities in the tag config_hash
NEWER = tuple(name for name in STORES if name not in OLDER)  # in the tag identity


def _unpack(packed_path: Path, out: Path) -> Path:
    with gzip.open(packed_path) as packed, (out / "mlflow.db").open("wb") as database:
        shutil.copyfileobj(packed, database)
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each reference store unzipped into an out dir of its own."""
    return {name: _unpack(RESULTS / "reference" / "store" / f"{name}.db.gz",
                          tmp_path_factory.mktemp(name)) for name in STORES}


@pytest.fixture(scope="module")
def loaded(stores: dict[str, Path]) -> pd.DataFrame:
    """Every run ``rlbench.results.load`` gives of the reference stores."""
    return pd.concat([rlbench.results.load(stores[name], suite=suite)
                      for name, suite in STORES.items()], ignore_index=True)


def _tag(out_dir: Path, key: str) -> dict[str, str]:
    """Each run's tag ``key`` as stored, by run id."""
    with sqlite3.connect(out_dir / "mlflow.db") as connection:
        return dict(connection.execute("SELECT run_uuid, value FROM tags WHERE key = ?",
                                       (key,)).fetchall())


def test_the_committed_stores_are_every_store_there_is() -> None:
    assert {path.name.removesuffix(".db.gz") for path in
            (RESULTS / "reference" / "store").glob("*.db.gz")} == set(STORES)


@pytest.mark.parametrize("name", OLDER)
def test_the_identity_of_an_older_run_is_its_config_hash_tag(
        name: str, stores: dict[str, Path]) -> None:
    frame = rlbench.results.load(stores[name], suite=name)
    stored = _tag(stores[name], "config_hash")
    assert len(frame) > 20
    assert dict(zip(frame.run_id, frame.identity, strict=True)) == {
        run_id: stored[run_id] for run_id in frame.run_id}
    assert frame.identity.is_unique  # one row per identity: its latest finished attempt
    assert not {"config_hash", "tag.config_hash"} & set(frame.columns)


def test_the_offline_runs_keep_their_config_identity_tag(stores: dict[str, Path]) -> None:
    frame = rlbench.results.load(stores["offline"], suite="offline")
    stored = _tag(stores["offline"], "config_identity")
    tagged = frame[frame.run_id.isin(stored)]
    assert len(tagged) > 5
    assert list(tagged["tag.config_identity"]) == [stored[r] for r in tagged.run_id]


@pytest.mark.parametrize("name", NEWER)
def test_the_identity_of_a_run_is_its_identity_tag(name: str,
                                                   stores: dict[str, Path]) -> None:
    frame = rlbench.results.load(stores[name], suite=STORES[name])
    stored = _tag(stores[name], "identity")
    assert len(frame) > 0
    assert dict(zip(frame.run_id, frame.identity, strict=True)) == {
        run_id: stored[run_id] for run_id in frame.run_id}
    assert frame.identity.is_unique


def test_the_mujoco_v5_table_is_five_seeds_of_five_tasks(stores: dict[str, Path]) -> None:
    frame = rlbench.results.load(stores["mujoco_v5"], suite="mujoco")
    assert sorted(frame.groupby("env").seed.nunique().items()) == [
        (env, 5) for env in ("Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5",
                             "Walker2d-v5")]
    assert (frame.frames >= 1_000_000).all()


def test_the_committed_reports_group_the_runs_as_they_did(loaded: pd.DataFrame) -> None:
    """Each run of a committed ``rlbench compare`` report (runs.csv) has the config column
    it had there: the same groups."""
    config = dict(zip(loaded.run_id, loaded.config, strict=True))
    reports = [path for path in sorted((RESULTS / "reference").glob("*/runs.csv"))
               if "run_id" in pd.read_csv(path, nrows=0).columns]
    assert len(reports) >= 5
    for path in reports:
        rows = pd.read_csv(path, dtype=str)
        assert {run_id: config.get(run_id) for run_id in rows.run_id} == dict(
            zip(rows.run_id, rows.config, strict=True)), path


def test_the_reference_leaderboard_publishes_the_runs_loaded(
        loaded: pd.DataFrame, tmp_path: Path) -> None:
    """The leaderboard the docs site carries, made from these stores, has a page for each
    run loaded and for no other: the same runs kept, one per identity."""
    publish_reference_stores(tmp_path / "stores", tmp_path / "site")
    pages = {path.name.split("-")[0]
             for path in (tmp_path / "site" / "suites").glob("*/runs/*.html")}
    assert pages == set(loaded.run_id)
