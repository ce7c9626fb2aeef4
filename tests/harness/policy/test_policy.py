"""A finished run's policy, rebuilt (``rlbench.load_policy``) and played (``rlbench eval``).

The replay of every recipe's own evaluation is in test_recipes_run.py; here: the
normalisation against a float64 reference, a plain gymnasium loop, what goes wrong when the
statistics are left out, the refusals, and videos rendered headless.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

import rlbench
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.policy.load import load_policy, play
from rlbench.harness.store.uri import tracking_uri

PPO_PENDULUM = ("algo=ppo", "env=Pendulum-v1", "ppo.normalize_observation=true",
                "ppo.use_sde=false", "ppo.num_envs=2", "ppo.rollout_steps=100", "ppo.epochs=2",
                "ppo.minibatch_size=50")


def train_run(out: Path, *words: str) -> Path:
    """One finished run into ``out`` (a single evaluation, at the end); its run directory."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert main(["run", "seeds=1", "frames=400", "eval_every=400", "eval_episodes=2",
                     f"out_dir={out}", *words]) == 0
    (run_dir,) = (out / "runs" / "adhoc").iterdir()
    return run_dir


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PPO on Pendulum with observation normalisation: it saves normalization.pt."""
    return train_run(tmp_path_factory.mktemp("ppo"), *PPO_PENDULUM)


def _logged_return(run_dir: Path) -> float:
    last = (run_dir / "curve.csv").read_text().splitlines()[-1]
    return float(last.split(",")[1])


def test_policy_normalises_like_a_float64_reference(ppo_run: Path) -> None:
    """``act`` on raw observations = the actor's mean on clip((obs - mean) / sqrt(var +
    eps), -10, 10) with the saved statistics, computed here in float64."""
    policy = rlbench.load_policy(ppo_run)
    saved = torch.load(ppo_run / "normalization.pt", weights_only=True)
    stats = {name.rpartition(".")[2]: value.double() for name, value in saved.items()}
    observations = torch.randn(64, 3, dtype=torch.float64) * 3
    scaled = ((observations - stats["mean"]) / torch.sqrt(stats["var"] + 1e-8)).clamp(-10, 10)
    loc_net = copy.deepcopy(policy.actor.network.loc_net).double()
    with torch.no_grad():
        expected = loc_net(scaled)
    got = policy.act(observations.numpy())
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (64, 1)
    torch.testing.assert_close(torch.from_numpy(got).double(), expected, atol=1e-5, rtol=1e-5)
    assert not np.array_equal(got, _forgetful(ppo_run).act(observations.numpy()))
    assert torch.equal(policy.act(observations.float()), torch.from_numpy(got))


def _forgetful(run_dir: Path) -> rlbench.harness.policy.load.Policy:
    """A hand-made replay that loads policy.pt but forgets normalization.pt."""
    from rlbench.envs import make
    from rlbench.harness.policy.load import Policy

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    recipe = load_algorithm("ppo")
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in config["algo_params"].items()}
    env = make("Pendulum-v1")
    actor = recipe.make_policy(env, recipe.Config(**params))
    env.close()
    actor.load_state_dict(torch.load(run_dir / "policy.pt", weights_only=True))
    return Policy(actor, None, config, "hand-made")


def test_played_returns_are_the_runs_and_need_the_statistics(ppo_run: Path) -> None:
    policy = load_policy(ppo_run)
    seed = policy.config["seeds"]["eval_env"]
    returns = play(policy, episodes=2, seed=seed)
    assert sum(returns) / 2 == _logged_return(ppo_run)
    assert play(_forgetful(ppo_run), episodes=2, seed=seed) != returns


def test_act_drives_a_plain_gymnasium_loop(ppo_run: Path) -> None:
    """The episode a user plays with gymnasium and ``act`` is the one ``play`` plays."""
    policy = rlbench.load_policy(ppo_run)
    seed = policy.config["seeds"]["eval_env"]
    env = gym.make("Pendulum-v1")
    observation, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        observation, reward, terminated, truncated, _ = env.step(policy.act(observation))
        total += float(reward)
        done = terminated or truncated
    env.close()
    # rlbench envs keep rewards as float32, gymnasium hands out float64
    assert total == pytest.approx(play(policy, episodes=1, seed=seed)[0], rel=1e-6)


def test_a_run_id_loads_from_the_store(ppo_run: Path, tmp_path: Path) -> None:
    out_dir = ppo_run.parents[2]
    client = MlflowClient(tracking_uri(out_dir))
    (run,) = client.search_runs([client.get_experiment_by_name("adhoc").experiment_id],
                                "tags.kind = 'run'")
    by_id = load_policy(run.info.run_id, out_dir=out_dir)
    assert by_id.source == f"{run.info.run_id} in {client.tracking_uri}"
    by_dir = load_policy(ppo_run)
    for (name, a), (_, b) in zip(by_id.state_dict().items(), by_dir.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name

    failed = client.create_run(client.get_experiment_by_name("adhoc").experiment_id)
    client.set_tag(failed.info.run_id, "error", "ValueError: the loss went NaN")
    client.set_terminated(failed.info.run_id, "FAILED")
    with pytest.raises(ConfigError, match="is FAILED: only a finished run saved a policy "
                                          r"\(ValueError: the loss went NaN\)"):
        load_policy(failed.info.run_id, out_dir=out_dir)
    with pytest.raises(ConfigError, match=r"no run 0{32} in the store"):
        load_policy("0" * 32, out_dir=out_dir)


def test_runs_that_cannot_be_played_are_refused(ppo_run: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="neither a run directory nor an MLflow run id"):
        load_policy(tmp_path / "missing")

    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text((ppo_run / "config.yaml").read_text())
    (unfinished / "traceback.txt").write_text("Traceback ...")
    with pytest.raises(ConfigError, match="holds no policy.pt: the run did not finish "
                                          r"\(see its traceback.txt\)"):
        load_policy(unfinished)

    truncated = tmp_path / "truncated"
    truncated.mkdir()
    for name in ("config.yaml", "normalization.pt"):
        (truncated / name).write_bytes((ppo_run / name).read_bytes())
    (truncated / "policy.pt").write_bytes((ppo_run / "policy.pt").read_bytes()[:100])
    with pytest.raises(ConfigError, match=r"policy\.pt is not a readable state dict"):
        load_policy(truncated)

    resized = tmp_path / "resized"
    resized.mkdir()
    for name in ("policy.pt", "normalization.pt"):
        (resized / name).write_bytes((ppo_run / name).read_bytes())
    config = yaml.safe_load((ppo_run / "config.yaml").read_text())
    config["algo_params"]["hidden_sizes"] = [32, 32]
    (resized / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"policy\.pt does not fit the module its config builds"):
        load_policy(resized)

    forgotten = tmp_path / "forgotten"
    forgotten.mkdir()
    for name in ("policy.pt", "config.yaml"):
        (forgotten / name).write_bytes((ppo_run / name).read_bytes())
    with pytest.raises(ConfigError, match=r"did not save normalization\.pt, which its config"):
        load_policy(forgotten)


def test_eval_prints_the_runs_returns(ppo_run: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", f"run={ppo_run}"]) == 0
    out = capsys.readouterr().out
    mean = float(re.search(r"mean return (\S+)", out).group(1))
    assert mean == pytest.approx(_logged_return(ppo_run), rel=1e-5)
    assert len(re.findall(r"^episode ", out, flags=re.M)) == 2
    assert "first evaluation" not in out  # its only one: the table's final return

    assert main(["eval", f"run={ppo_run}", "episodes=3", "eval_seed=7"]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"seed (\d+)", out) == ["7", "8", "9"]
    assert "first evaluation" not in out


def test_act_gives_a_discrete_env_an_action_its_space_holds(tmp_path: Path) -> None:
    """CartPole's ``step`` asserts its action is in its space: a tensor is not."""
    run_dir = train_run(tmp_path, "algo=ppo", "env=CartPole-v1", "ppo.num_envs=2",
                        "ppo.rollout_steps=100", "ppo.epochs=1", "ppo.minibatch_size=50")
    policy = rlbench.load_policy(run_dir)
    env = gym.make("CartPole-v1")
    observation, _ = env.reset(seed=policy.config["seeds"]["eval_env"])
    total, done = 0.0, False
    while not done:
        action = policy.act(observation)
        assert type(action) is int and env.action_space.contains(action)
        observation, reward, terminated, truncated, _ = env.step(action)
        total, done = total + float(reward), terminated or truncated
    env.close()
    assert total == play(policy, episodes=1, seed=policy.config["seeds"]["eval_env"])[0]
    batch = policy.act(np.zeros((5, 4), dtype=np.float32))
    assert batch.dtype == np.int64 and batch.shape == (5,)


@pytest.mark.parametrize(("words", "message"), [
    ([], "eval needs the run to play: run=<MLflow run id or run directory>, or suite=<suite>"),
    (["run=RUN", "seed=7"], "run= names the run; seed= would pick one too: give one or the "
                            "other (the first episode's env seed is eval_seed=)"),
    (["run=abc"], "neither a run directory nor an MLflow run id"),
    (["run=RUN", "epsiodes=3"], "unknown eval key 'epsiodes'; did you mean episodes?"),
    (["run=RUN", "episodes=0"], "episodes must be between 1 and 10,000, got 0"),
    (["run=RUN", "episodes=many"], "episodes must be an integer, got 'many'"),
    (["run=RUN", "video=clip.avi"], "the file must end in .mp4 or .gif"),
    (["run=RUN", "video=nowhere/clip.mp4"], "its directory nowhere does not exist"),
    (["run=RUN", "env="], "env needs a value: env=..."),
    (["run=RUN", "env=CartPole-v1"], "but RUN was trained on Pendulum-v1: env= vouches for "
                                     "the run's env, it picks no other"),
    (["run=RUN", "device=gpu"], "device must be cpu, cuda, cuda:N or mps"),
    (["run=RUN", "run=RUN"], "run is given twice"),
])
def test_eval_refuses_bad_words(ppo_run: Path, capsys: pytest.CaptureFixture,
                                words: list[str], message: str) -> None:
    words = [word.replace("RUN", str(ppo_run)) for word in words]
    assert main(["eval", *words]) == 2
    captured = capsys.readouterr()
    assert message.replace("RUN", str(ppo_run)) in captured.err and captured.out == ""
    assert not list(Path.cwd().glob("*.mp4"))


def _frames(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """The frames of a GIF (Pillow), or of an MP4 of ``size`` (height, width) decoded by
    the ffmpeg that imageio-ffmpeg ships (its reader leaves pipes open)."""
    if size is None:
        import imageio.v3 as iio

        return iio.imread(path)
    import imageio_ffmpeg

    decoded = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path),
                              "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                             capture_output=True, check=True).stdout
    return np.frombuffer(decoded, np.uint8).reshape(-1, *size, 3)


def _video_return(out: str) -> float:
    return float(re.search(r"video of the episode with seed \d+ \(return (\S+)\)", out).group(1))


@pytest.mark.slow
def test_video_of_a_classic_env(ppo_run: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture) -> None:
    """Pendulum draws with pygame (no display here: SDL's dummy driver); a GIF of the
    first episode, 200 steps and the reset: 201 frames that move."""
    video = tmp_path / "pendulum.gif"
    assert main(["eval", f"run={ppo_run}", "episodes=1", f"video={video}"]) == 0
    out = capsys.readouterr().out
    frames = _frames(video)
    assert frames.shape[0] == 201 and frames.shape[-1] in (3, 4)
    assert np.abs(np.diff(frames.astype(np.int16), axis=0)).max() > 0
    episode_return = float(re.search(r"^episode +0 .* return (\S+)", out, re.M).group(1))
    assert _video_return(out) == pytest.approx(episode_return, rel=1e-5)


@pytest.mark.slow
def test_video_of_a_mujoco_env_renders_headless(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    """MuJoCo renders with EGL (Mesa's software rasteriser on a machine with no GPU): an
    MP4 with one frame per step plus the reset, of the episode ``play`` plays first."""
    run_dir = train_run(tmp_path / "out", "algo=sac", "env=Hopper-v5",
                        "sac.learning_starts=200", "sac.batch_size=32",
                        "sac.hidden_sizes=[16,16]")
    video = tmp_path / "hopper.mp4"
    assert main(["eval", f"run={run_dir}", "episodes=1", f"video={video}"]) == 0
    out = capsys.readouterr().out
    frames = _frames(video, (480, 480))
    policy = load_policy(run_dir)
    env = gym.make("Hopper-v5")
    observation, _ = env.reset(seed=policy.config["seeds"]["eval_env"])
    steps, done = 0, False
    while not done:
        observation, _, terminated, truncated, _ = env.step(policy.act(observation))
        steps, done = steps + 1, terminated or truncated
    env.close()
    assert frames.shape == (steps + 1, 480, 480, 3)
    assert frames.std() > 10, "a rendered scene, not a blank frame"
    episode_return = float(re.search(r"^episode +0 .* return (\S+)", out, re.M).group(1))
    assert _video_return(out) == pytest.approx(episode_return, rel=1e-5)


# a 1000-step episode rendered in software (minutes): nightly; the MuJoCo and classic videos
# run in every CI run
@pytest.mark.nightly
def test_video_of_a_dm_control_task(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """dm_control frames come from ``physics.render`` at 480x640, one per control step."""
    run_dir = train_run(tmp_path / "out", "algo=td3", "env=dmc:cartpole-balance",
                        "td3.learning_starts=200", "td3.batch_size=32",
                        "td3.hidden_sizes=[16,16]")
    video = tmp_path / "cartpole.mp4"
    assert main(["eval", f"run={run_dir}", "episodes=1", f"video={video}"]) == 0
    out = capsys.readouterr().out
    frames = _frames(video, (480, 640))
    assert frames.shape[0] == 1001 and frames.std() > 10
    episode_return = float(re.search(r"^episode +0 .* return (\S+)", out, re.M).group(1))
    assert _video_return(out) == pytest.approx(episode_return, rel=1e-5)


def test_eval_writes_a_video_only_over_a_video(ppo_run: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    """``video=`` naming a link, or a file that is not a video (a store named ``.mp4``):
    refused before anything plays, and the file and what the link points to unchanged."""
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's own file")
    os.symlink(notes, tmp_path / "linked.gif")
    (tmp_path / "store.mp4").write_bytes(b"SQLite format 3\x00" + bytes(100))
    for name, message in (("linked.gif", "is a link"), ("store.mp4", "is an SQLite database")):
        assert main(["eval", f"run={ppo_run}", "episodes=1", f"video={tmp_path / name}"]) == 2
        assert message in capsys.readouterr().err
    assert notes.read_text() == "the user's own file"
    assert (tmp_path / "store.mp4").read_bytes().startswith(b"SQLite format 3")
