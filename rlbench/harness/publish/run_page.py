"""A run's page: what it is, how it ended, the commands that make it again, its curve,
config, tags and versions, and where its artifacts are (as text: the site links nothing
outside itself); its tables in one CSV and one JSON beside it.

The commands are built from what the store holds, which anyone who could write to it
chose: every word is quoted for the shell (``shell_word``), so a tag holding ``$(...)``,
a backtick or ``; rm`` is pasted as that text and runs nothing."""

from __future__ import annotations

import json
import re
import shlex
import urllib.parse
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np

from rlbench.harness.analysis.comparison import RunRecord
from rlbench.harness.plan.config import ADHOC_SUITE
from rlbench.harness.publish.charts import PALETTE, Series, line_chart
from rlbench.harness.publish.data_files import slug, stacked_csv, table_record
from rlbench.harness.publish.markup import Cell, Table, facts, fmt, page, table, text

__all__ = ["portable_tags", "run_page", "shell_word"]

# Columns of a run's rlbench.results row shown among its tags (not its host: a machine's
# id means nothing where the site is read)
_VERSIONS = ("git_commit", "git_dirty", "rlbench_version", "torch_version",
             "tensordict_version", "gymnasium_version", "mujoco_version", "python_version",
             "device", "identity")


def run_page(suite: str, row: Mapping[str, Any], record: RunRecord) -> dict[str, str]:
    """The run's page and its data files, by their paths in the site."""
    suite_dir = f"suites/{slug(suite)}/"
    here = f"{suite_dir}runs/"
    stem = slug(row["run_id"])
    root = "../../../"
    files: dict[str, str] = {}
    params = {c.removeprefix("param."): row[c] for c in row
              if c.startswith("param.") and isinstance(row[c], str)}
    tags = portable_tags({c.removeprefix("tag."): row[c] for c in row
                          if c.startswith("tag.") and isinstance(row[c], str) and row[c]})
    tags.update({c: row[c] for c in _VERSIONS if isinstance(row.get(c), str) and row[c]})
    final = record.final_return
    summary = [("algorithm", text(row["algorithm"])),
               ("env or dataset", text(row["env"])),
               ("seed", text(row["seed"])), ("status", text(row["status"])),
               ("budget", text(f"{record.budget:,} {record.unit}")),
               ("final " + ("D4RL normalized score" if record.refs else "return"),
                text(fmt(final)) if final is not None else "no evaluation recorded"),
               ("code", text(record.code)), ("store", text(row["store"]))]
    body = [facts(summary)]
    if row.get("error"):
        body += ["<h2>Error</h2>", f'<pre class="failed">{text(row["error"])}</pre>']
    body += ["<h2>Reproduce</h2>", f"<pre>{text(_command(row, params))}</pre>"]
    score = "D4RL normalized score" if record.refs else "return"
    steps = np.array(sorted(record.curve), dtype=np.float64)
    values = np.array([record.curve[int(s)] for s in steps])
    curve = Table("curve", [record.unit, score], [
        [Cell.of(f"{int(s):,}", int(s)), Cell.of(fmt(v, 3), v)]
        for s, v in zip(steps, values, strict=True)], data=stem)
    config = Table("config", ["param", "value"],
                   [[Cell.of(k), Cell.of(v)] for k, v in sorted(params.items())], data=stem)
    tag_table = Table("tags", ["tag", "value"],
                      [[Cell.of(k), Cell.of(v)] for k, v in sorted(tags.items())],
                      data=stem)
    if record.curve:
        chart = line_chart([Series(row["algorithm"], steps, values)], x_label=record.unit,
                           y_label=score, colours={row["algorithm"]: PALETTE[0]})
        body += ["<h2>Evaluation curve</h2>", f"<figure>{chart}</figure>", table(curve)]
    body += ["<h2>Config</h2>", table(config), "<h2>Tags and versions</h2>",
             table(tag_table), "<h2>Artifacts</h2>", _artifacts(row)]
    # one CSV and one JSON per run, holding its three tables: a store of 10,000 runs
    # makes 30,000 files, not 70,000
    files[f"{here}{stem}.csv"] = stacked_csv([curve, config, tag_table])
    files[f"{here}{stem}.json"] = json.dumps(
        {"run_id": row["run_id"],
         "tables": [table_record(t) for t in (curve, config, tag_table)]},
        sort_keys=True, allow_nan=False) + "\n"
    files[f"{here}{stem}.html"] = page(
        f"{row['algorithm']} on {row['env']}, seed {row['seed']}", body, root=root,
        crumbs=[(f"{root}{suite_dir}index.html", f"suite {suite}"),
                (f"{root}{suite_dir}tasks/{slug(row['env'])}/index.html", row['env'])])
    return files


def portable_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """A run's tags as a reader elsewhere can use them: its run directory relative to the
    store's out dir (``runs/<suite>/<run>``), a recipe file by its name (its sha256 is the
    ``recipe_sha256`` tag); absolute paths of the machine that ran it say nothing there."""
    shown = dict(tags)
    if "run_dir" in shown:
        shown["run_dir"] = _in_store(shown["run_dir"])
    if shown.get("recipe", "").endswith(".py"):
        shown["recipe"] = PurePath(shown["recipe"]).name
    return shown


def _in_store(run_dir: str) -> str:
    """``<out_dir>/runs/<suite>/<run>`` as ``runs/<suite>/<run>``; another absolute path as
    its last part, a relative one (another tool's) as it is."""
    path = PurePath(run_dir)
    if not path.is_absolute():
        return run_dir
    parts = path.parts
    return "/".join(parts[-3:]) if len(parts) >= 4 and parts[-3] == "runs" else path.name


def _command(row: Mapping[str, Any], params: dict[str, str]) -> str:
    """The commands that make this run again: its commit, then ``rlbench run`` with its
    suite, algorithm, env or dataset, budget, evaluation and every hyperparameter as it
    ran (``seeds`` counts from 0, so this seed is the last of those it runs; finished
    ones in the out_dir are kept). The commit is rlbench's: a recipe named by file or
    module lies outside it, and the block says what to supply (a file by its sha256)."""
    suite = [] if row["suite"] == ADHOC_SUITE else [f"suite={row['suite']}"]
    recipe = row.get("tag.recipe")  # a recipe named by module or file: named so again
    recipe = recipe if isinstance(recipe, str) and recipe else ""
    algo_word = PurePath(recipe).name if recipe.endswith(".py") else recipe or row["algorithm"]
    words = ["rlbench", "run", *suite, f"algo={algo_word}"]
    words.append(f"dataset={params['dataset']}" if params.get("dataset")
                 else f"env={row['env']}")
    for key in ("frames", "steps", "eval_every", "eval_episodes", "base_seed", "device"):
        if params.get(key):
            words.append(f"{key}={params[key]}")
    index = params.get("seed_index", "")
    words.append(f"seeds={(int(index) if index.isdigit() else int(row['seed'])) + 1}")
    algo = params.get("algo", row["algorithm"])
    words += [f"{algo}.{k.removeprefix('algo_params.')}={_yaml_value(v)}"
              for k, v in sorted(params.items()) if k.startswith("algo_params.")]
    commit = row.get("git_commit")
    lines = []
    if isinstance(commit, str) and _COMMIT.fullmatch(commit):
        lines.append(f"git checkout {commit}  # rlbench's code"
                     + (" (it ran with uncommitted changes)" if row.get("git_dirty") == "true"
                        else "") + (f", which holds no {shell_word(algo_word)}" if recipe else ""))
    if recipe.endswith(".py"):
        digest = row.get("tag.recipe_sha256")
        digest = digest if isinstance(digest, str) and _SHA256.fullmatch(digest) else None
        lines.append(f"# put the recipe file {shell_word(algo_word)} here"
                     + (f" (sha256 {digest})" if digest else " (its sha256 was not recorded)"))
    elif recipe:
        lines.append(f"# install the package of the recipe module {shell_word(recipe)}")
    lines.append(" ".join(shell_word(w) for w in words))
    return "\n".join(lines)


_COMMIT = re.compile(r"[0-9a-fA-F]{7,64}")  # a commit id: anything else is not checked out
_SHA256 = re.compile(r"[0-9a-f]{64}")


def shell_word(word: str) -> str:
    """``word`` quoted for bash: single quotes (``shlex.quote``), or, when it holds
    a character that is not printable (an escape code, a line break), bash's ``$'...'``
    with that character as ``\\xHH`` bytes, so the page shows it and a paste passes it
    back exactly, running nothing."""
    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(char) for char in word) + "'"


def _ansi_c(char: str) -> str:
    """One character inside ``$'...'``."""
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    return "".join(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))


def _yaml_value(logged: str) -> str:
    """A hyperparameter as MLflow logged it (Python's text of the value) as the command
    line reads it (YAML): tuples as lists, without spaces."""
    if logged.startswith("(") and logged.endswith(")"):
        logged = "[" + logged[1:-1].rstrip(",") + "]"
    return logged.replace(", ", ",")


def _artifacts(row: Mapping[str, Any]) -> str:
    """Where the run's artifacts are, as text and never as a link: a site links only files
    inside itself, and artifacts (saved policies, checkpoints: megabytes to gigabytes a
    run) are not copied into it. What their small files hold (the curve, the resolved
    config, the tags) is on this page and in its CSV and JSON. The run's own MLflow URI
    (``runs:/<id>/``) fetches them from the store that holds it, wherever that store is
    (``mlflow artifacts download --artifact-uri runs:/<id>/``). A location the store
    recorded is shown when it is not a local path (an s3 or server URI); a local one means
    nothing where the site is read. The run directory is where the run kept its files on
    the host that ran it."""
    pairs = [("MLflow artifacts", f"<code>runs:/{text(row['run_id'])}/</code> in "
                                  f"{text(row['store'])}")]
    uri = row.get("artifact_uri")
    if isinstance(uri, str) and uri and urllib.parse.urlsplit(uri).scheme.lower() not in (
            "", "file"):
        pairs.append(("recorded at", f"<code>{text(uri)}</code>"))
    run_dir = row.get("tag.run_dir")
    if isinstance(run_dir, str) and run_dir:
        pairs.append(("run directory", f"<code>{text(_in_store(run_dir))}</code> in the "
                                       "out dir of the store it ran into (its config.yaml, "
                                       "curve.csv and saved policies)"))
    return facts(pairs)
