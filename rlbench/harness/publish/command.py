"""The ``rlbench publish`` command: read its words (``PUBLISH_TABLE``) and the stores,
render the site, put it in place whole.

The site is first written to a fresh directory beside ``output``, every file and
directory flushed to disk, and then renamed into place, so a failure or a crash leaves the
earlier site (or nothing), never half a site. ``output`` may be new, empty, or a site
published before (it is replaced); anything else is refused.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from rlbench.envs import validate_env_id
from rlbench.errors import ConfigError, near_matches, quote
from rlbench.harness.analysis.baselines import default_baseline_dir
from rlbench.harness.plan.command_keys import DEFAULT_OUT_DIR, PUBLISH_TABLE, Filters
from rlbench.harness.publish.collect import SuiteData, collect, suites_in
from rlbench.harness.publish.pages import site_files
from rlbench.harness.publish.stores import Store, open_stores
from rlbench.harness.store.sqlite import check_out_dir, sqlite_path
from rlbench.owned_files import (
    check_target,
    create_file,
    fsync_path,
    is_inside,
    new_dir_mode,
)

__all__ = ["PublishRequest", "parse_publish_args", "publish", "run_publish"]

KEYS = PUBLISH_TABLE.names
MARKER = ".rlbench-site"  # in every site's top directory: what may be replaced


@dataclass
class PublishRequest:
    output: Path
    suites: list[str] = field(default_factory=list)  # empty: every suite of the stores
    filters: Filters = field(default_factory=Filters)
    stores: list[Path] = field(default_factory=list)
    tracking_uris: list[str] = field(default_factory=list)
    baselines: Path = field(default_factory=default_baseline_dir)
    seed: int = 0
    reps: int = 2000


def parse_publish_args(args: Sequence[str]) -> PublishRequest:
    """``key=value`` words to a request; unknown keys raise with near matches."""
    words = PUBLISH_TABLE.parse(args)
    request = PublishRequest(
        output=words["output"], suites=words["suite"] or [], filters=Filters.of(words),
        stores=words["stores"] or [], tracking_uris=words["tracking_uri"] or [],
        baselines=words["baselines"] or default_baseline_dir(), seed=words["seed"],
        reps=words["reps"])
    for env in request.filters.envs:
        validate_env_id(env)
    if not (request.baselines / "normalization.csv").is_file():
        raise ConfigError(f"baselines={request.baselines}: no normalization.csv there")
    uris = request.tracking_uris or (
        [] if request.stores else [os.environ.get("MLFLOW_TRACKING_URI", "")])
    stores = [*request.stores, *filter(None, map(sqlite_path, uris))]
    if not (request.stores or request.tracking_uris or os.environ.get("MLFLOW_TRACKING_URI")):
        stores.append(DEFAULT_OUT_DIR)  # what open_stores reads when none is given
    for store in stores:  # compared as places: ``x/../S`` and a link to ``S`` are ``S``
        if is_inside(store, request.output):
            raise ConfigError(f"output={request.output} holds the store {store}: publishing "
                              "would replace it; give an output outside it")
    check_output(request.output)
    return request


# What a published site holds: its pages, their data and charts, and its marker.
SITE_SUFFIXES = frozenset({".html", ".csv", ".json", ".svg", ".png", ".css", ".js"})


def check_output(output: Path) -> None:
    """Refuses an ``output`` that is a link, a file, a directory holding anything but an
    earlier site (a site's files only: no store, no dataset, no link), or a place this
    process cannot write, before anything is read."""
    if output.is_symlink():
        raise ConfigError(f"output={output} is a link: rlbench replaces a site only at its "
                          "own path; give the directory it points to")
    check_out_dir(output, key="output")  # a directory, or one that can be made
    check_out_dir(output.absolute().parent, key="output's parent")  # the new site goes there
    try:
        if not output.is_dir() or not any(output.iterdir()):
            return
    except OSError as err:
        raise ConfigError(f"output={output} cannot be read ({err.strerror or err})") from err
    if not (output / MARKER).is_file():
        raise ConfigError(f"output={output} holds files that are not a site rlbench "
                          "published: give a new or empty directory")
    stray = _not_of_a_site(output)
    if stray is not None:
        raise ConfigError(f"output={output} is a site rlbench published, but it also holds "
                          f"{stray}, which no site holds: publishing would replace it; give "
                          "another output, or move it out")


def _not_of_a_site(site: Path) -> str | None:
    """The first entry under ``site`` a published site never holds (a link, a special file,
    a store or dataset, a file of another suffix) or that cannot be read, described; None
    when there is none. An entry gone between the listing and the look is not there."""
    unlisted: list[OSError] = []
    # os.walk follows no link into a directory, and tells of one it cannot list
    for directory, dirs, files in os.walk(site, onerror=unlisted.append):
        if unlisted:
            break
        for name in sorted(dirs + files):
            found = _not_a_site_entry(Path(directory) / name)
            if found is not None:
                return found
    if not unlisted:
        return None
    err = unlisted[0]
    return (f"the directory {quote(str(err.filename))}, which cannot be read "
            f"({err.strerror or err})")


def _not_a_site_entry(path: Path) -> str | None:
    """``path`` described when a site never holds it; None for a site's file or directory,
    or an entry gone meanwhile."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"{quote(str(path))}, which cannot be looked up ({err.strerror or err})"
    if stat.S_ISLNK(mode):
        return f"the link {quote(str(path))}"
    if stat.S_ISDIR(mode):
        return None
    if not stat.S_ISREG(mode):
        return f"the special file {quote(str(path))}"
    if path.name != MARKER and path.suffix not in SITE_SUFFIXES:
        return f"the file {quote(str(path))}"
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK))
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"the file {quote(str(path))}, which cannot be read ({err.strerror or err})"
    try:
        check_target(path, "site file")
    except ConfigError:
        return f"the file {quote(str(path))} (not a page, chart or table)"
    return None


def _suites(request: PublishRequest, stores: Sequence[Store],
            held: Mapping[str, Collection[str]]) -> list[str]:
    present = sorted({s for store in stores for s in held[store.name]})
    if not present:
        raise ConfigError(f"no runs to publish: {', '.join(s.given for s in stores)} hold "
                          "no suite")
    for suite in request.suites:
        if suite not in present:
            hint = near_matches(suite, present)
            raise ConfigError(f"no store given holds suite {quote(suite)} (they hold "
                              f"{', '.join(present)})"
                              + (f"; did you mean {', '.join(hint)}?" if hint else ""))
    return request.suites or present


def publish(request: PublishRequest) -> tuple[list[SuiteData], int]:
    """Reads every suite and writes the site; returns the suites and the files written."""
    stores = open_stores(request.stores, request.tracking_uris)
    clients = {store.name: store.client for store in stores}
    held = {store.name: set(suites_in(store.client)) for store in stores}  # once per store
    suites = [collect(clients, suite, request.filters, request.baselines, seed=request.seed,
                      reps=request.reps, held=held) for suite in _suites(request, stores, held)]
    suites = [s for s in suites if not s.runs.empty]
    if not suites:
        raise ConfigError("no run of the suites matches the filters given")
    files = site_files(suites, {store.name: store.kind for store in stores},
                       reps=request.reps, seed=request.seed)
    write_site(files, request.output)
    return suites, len(files)


def write_site(files: dict[str, str], output: Path) -> None:
    """Writes ``files`` to a new directory beside ``output``, each flushed to disk, then
    swaps it in: a reader sees the old site or the new one, and a failure (a full disk)
    leaves the old one, is a ``ConfigError`` and leaves nothing else behind. Once swapped
    in, the rename is flushed and the old site removed; a failure there is a
    ``ConfigError`` that says the site was written."""
    place = output.absolute()
    try:
        retired = _swap_in(files, place)
    except OSError as err:
        raise ConfigError(f"the site could not be written to {output} ({err.strerror or err}"
                          f"{': ' + err.filename if err.filename else ''}); the earlier "
                          "site, if any, is as it was") from None
    try:
        fsync_path(place.parent)
    except OSError as err:
        kept = "" if retired is None else f"; the earlier one is kept in {retired}"
        raise ConfigError(f"the site was written to {output}, but its directory could not be "
                          f"flushed to disk ({err.strerror or err}): a crash before the "
                          f"system writes it may lose the new site{kept}") from None
    if retired is None:
        return
    try:
        shutil.rmtree(retired)
    except OSError as err:
        raise ConfigError(f"the site was written to {output}, but the earlier one, moved to "
                          f"{retired}, could not be removed ({err.strerror or err}); remove "
                          "it by hand") from None


def _swap_in(files: dict[str, str], output: Path) -> Path | None:
    """The site written whole in a new directory beside ``output`` and renamed into its
    place; the earlier site's new place (to remove), None where there was none."""
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    retired: Path | None = None
    try:
        _write_staging(files, staging)
        if output.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{output.name}.old.", dir=output.parent))
            output.rename(retired / "site")
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if retired is not None:
            if (retired / "site").exists() and not output.exists():
                (retired / "site").rename(output)  # the old site back where it was
            shutil.rmtree(retired, ignore_errors=True)
        raise
    return retired


def _write_staging(files: dict[str, str], staging: Path) -> None:
    """Every file and the marker written into ``staging`` and flushed to disk, then each
    directory, deepest first: the site is whole on disk before it is renamed into place."""
    made = {staging}
    for name, content in sorted(files.items()):
        path = staging / name
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.update((path.parent, *path.parent.parents))
        create_file(path, content.encode("utf-8"))
    create_file(staging / MARKER, b"a site made by rlbench publish; rerunning the command "
                                  b"replaces this whole directory\n")
    staging.chmod(new_dir_mode())  # mkdtemp makes it private; a site is for reading
    for directory in sorted((d for d in made if d.is_relative_to(staging)),
                            key=lambda d: len(d.parts), reverse=True):
        fsync_path(directory)


def run_publish(args: Sequence[str], console: Console) -> int:
    """The command; returns the exit code. Bad input raises ``ConfigError`` (exit 2)."""
    request = parse_publish_args(args)
    suites, count = publish(request)
    for data in suites:
        console.print(f"{data.name}: {len(data.runs)} runs ({data.finished} finished)",
                      markup=False, highlight=False)
    print(f"rlbench: wrote {count} files under {request.output}; open "
          f"{request.output / 'index.html'}", file=sys.stderr)
    return 0
