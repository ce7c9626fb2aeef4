"""A ``d4rl:`` or ``minari:`` name reads inside its dataset home only: a name that climbs
out (``..``) or is absolute is refused in one line naming it (exit 2), even where a valid
dataset lies at the place it points to; a path names a file anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.data import load_dataset
from rlbench.errors import ConfigError
from tests.properties.hdf5_files import pendulum_d4rl, pendulum_minari


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty dataset homes under ``tmp_path/home``; valid datasets beside them, outside:
    ``tmp_path/x-v2.hdf5`` and ``tmp_path/evil/pendulum-v0``."""
    (tmp_path / "home" / "d4rl").mkdir(parents=True)
    (tmp_path / "home" / "minari" / "ns").mkdir(parents=True)
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "home" / "d4rl"))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "home" / "minari"))
    pendulum_d4rl(tmp_path / "x-v2.hdf5")
    pendulum_d4rl(tmp_path / "home" / "x-v2.hdf5")
    pendulum_minari(tmp_path / "evil" / "pendulum-v0")
    pendulum_minari(tmp_path / "home" / "evil" / "pendulum-v0")
    return tmp_path


def _outside(root: Path) -> list[str]:
    return ["d4rl:../x-v2", "d4rl:../../x-v2", f"d4rl:{root / 'x-v2'}", "d4rl:sub/../x-v2",
            "minari:../evil/pendulum-v0", "minari:../../evil/pendulum-v0",
            "minari:ns/../../evil/pendulum-v0", "minari:ns/../../../evil/pendulum-v0",
            f"minari:{root / 'evil' / 'pendulum-v0'}", "minari:..\\..\\evil\\pendulum-v0"]


def test_a_name_out_of_the_dataset_home_is_refused(homes: Path) -> None:
    for source in _outside(homes):
        with pytest.raises(ConfigError) as refused:
            load_dataset(source)
        message = str(refused.value)
        assert repr(source)[:20] in message and "\n" not in message, message
        assert ("holds no path separator" in message) == source.startswith("d4rl:")


def test_a_name_out_of_the_dataset_home_exits_2_in_one_line(
        homes: Path, capsys: pytest.CaptureFixture) -> None:
    for source in ("d4rl:../x-v2", "minari:ns/../../evil/pendulum-v0"):
        for words in (["dataset", "info", source],
                      ["show", "suite=offline_smoke", f"dataset={source}"],
                      ["run", "suite=offline_smoke", f"dataset={source}", "dry_run=true",
                       f"out_dir={homes / 'runs'}"]):
            assert main(words) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith("rlbench: error: dataset "), err
            assert repr(source) in err
    assert not (homes / "runs").exists()


def test_names_inside_the_home_and_paths_anywhere_still_load(homes: Path) -> None:
    pendulum_minari(homes / "home" / "minari" / "ns" / "pendulum-v0")
    pendulum_d4rl(homes / "home" / "d4rl" / "pendulum_prop-v0.hdf5")
    assert len(load_dataset("minari:ns/pendulum-v0")) == 8
    assert len(load_dataset("d4rl:pendulum-prop-v0")) > 0
    assert len(load_dataset(homes / "x-v2.hdf5")) > 0
    assert len(load_dataset(str(homes / "evil" / "pendulum-v0"))) == 8
