"""Where algorithm recipes come from: rlbench's own, installed packages' and the user's.

Each recipe has a short name, the one runs, tables and ``<name>.<hyperparameter>`` keys use.

- **built in**: the modules of ``rlbench.algorithms`` (the repository's ``algorithms/``);
- **installed**: the entry points of the group ``rlbench.algorithms`` that packages declare
  (``[project.entry-points."rlbench.algorithms"]`` ``mybc = "my_pkg.mybc"`` in their
  ``pyproject.toml``), named by the entry point;
- **named on the command line**: ``algo=my_pkg.mybc`` (an importable module, named by its
  last part) or ``algo=path/to/mybc.py`` (a file, named by its stem; its directory goes
  first on ``sys.path``, as when Python runs a script, so it imports its neighbours; a file
  inside a package, a directory with ``__init__.py``, is imported as that package's module
  from the directory above it, so its absolute imports of the package work).

Code is imported only where the user points at it: installed packages, and modules or
files named on the command line (or passed in Python). A name read from a suite file or a
stored run never imports anything else: such a run records where its recipe came from
(``RunConfig.recipe``) and is loaded again only when its user names that recipe again.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
import types
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from rlbench.errors import ConfigError, UnknownNameError, quote

__all__ = ["ENTRY_POINT_GROUP", "RecipeImportError", "RecipeSource", "builtin_names",
           "check_contract", "import_recipe", "name_recipe", "recipe_sources"]

ENTRY_POINT_GROUP = "rlbench.algorithms"
_PACKAGE = "rlbench.algorithms"
# What a recipe module defines (rlbench.recipe's docstring says what each is)
CONTRACT = ("KIND", "ACTION_SPACES", "Config", "FAMILY_DEFAULTS", "train", "make_policy")
KINDS = ("online", "offline")
ACTION_SPACES = ("discrete", "box")
# The first parts of keys that are not hyperparameters (``ray.address``, ``slurm.qos``,
# compare's ``param.x`` and ``tag.x``): a recipe of such a name could take none
RESERVED_NAMES = ("ray", "slurm", "param", "tag")


class RecipeImportError(ConfigError):
    """A recipe module that raised while it was imported: ``details`` is its traceback,
    printed whole before the one line of the error."""

    def __init__(self, message: str, details: str):
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class RecipeSource:
    """One recipe: its ``name``, the ``module`` it is imported as, where it comes from
    (``origin``: ``built in``, ``installed from <distribution> <version>`` or ``command
    line``) and, for one named on the command line, what was named (``location``: the
    module or the file's absolute path), which other processes import again."""

    name: str
    module: str
    origin: str
    location: str = ""

    @property
    def file(self) -> Path | None:
        """The recipe's file, for one named by its path."""
        return Path(self.location) if self.location.endswith(".py") else None

    @property
    def import_root(self) -> Path | None:
        """The directory a recipe file's module is imported from: the file's own, or the
        one above its top-level package."""
        if self.file is None:
            return None
        return self.file.parents[self.module.count(".")]


# The recipes named on this process's command line, by name
_named: dict[str, RecipeSource] = {}


def builtin_names() -> list[str]:
    """The recipes in ``algorithms/`` (modules starting with ``_`` hold what several
    recipes share)."""
    package = importlib.import_module(_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                  if not m.ispkg and not m.name.startswith("_"))


@functools.cache
def _entry_points() -> tuple[EntryPoint, ...]:
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _installed() -> tuple[dict[str, RecipeSource], dict[str, str]]:
    """The installed recipes by name, and the names two sources claim with why (an entry
    point named like a built-in recipe, two packages declaring one name)."""
    builtin = set(builtin_names())
    found: dict[str, RecipeSource] = {}
    clashes: dict[str, str] = {}
    for point in _entry_points():
        dist = point.dist
        origin = (f"installed from {dist.name} {dist.version}" if dist is not None
                  else "installed")
        where = f"the entry point {point.name} = {point.value} ({origin})"
        if not point.name.isidentifier() or point.name in RESERVED_NAMES:
            clashes[point.name] = (f"{where} is not a name a recipe can have: an identifier "
                                   f"(its hyperparameters are {point.name}.<field>), not one "
                                   f"of {', '.join(RESERVED_NAMES)}")
        elif point.name in builtin:
            clashes[point.name] = f"{where} shadows the built-in recipe {point.name}"
        elif point.name in found and found[point.name].module != point.module:
            clashes[point.name] = (f"two installed packages declare a recipe {point.name}: "
                                   f"{found[point.name].module} and {point.module}")
        elif point.attr:
            clashes[point.name] = (f"{where} names an attribute; a recipe entry point names "
                                   "a module (mybc = \"my_pkg.mybc\")")
        else:
            found[point.name] = RecipeSource(point.name, point.module, origin)
    for name in clashes:
        found.pop(name, None)
    return found, clashes


def recipe_sources() -> dict[str, RecipeSource]:
    """Every recipe this process can run, by name, built-in ones first."""
    sources = {name: RecipeSource(name, f"{_PACKAGE}.{name}", "built in")
               for name in builtin_names()}
    sources.update(_installed()[0])
    sources.update(_named)
    return sources


def clashes() -> dict[str, str]:
    """Names claimed twice by installed packages (or by one and a built-in recipe), with
    what claims them: such a name is refused until one of them is renamed."""
    return _installed()[1]


def _is_location(text: str) -> bool:
    """Whether a command-line word names a module or a file rather than a recipe name."""
    return text.endswith(".py") or "/" in text or "\\" in text or "." in text


def name_recipe(text: str) -> str:
    """The name of the recipe a command-line word names: a recipe's name, an importable
    module (``my_pkg.mybc``) or a ``.py`` file, which is imported and checked against the
    contract here, once per process. Raises ``ConfigError`` for a name nothing has, a
    module that is not a recipe or fails to import, and a name another recipe has."""
    sources = recipe_sources()
    if text in clashes():
        raise ConfigError(f"algorithm {text}: {clashes()[text]}: rename one of them")
    if text in sources:
        return text
    if not _is_location(text):
        raise UnknownNameError("algorithm", text, sources)
    source = _command_line_source(text)
    if source.name in RESERVED_NAMES:
        raise ConfigError(f"algo={text}: a recipe cannot be named {source.name} (keys "
                          f"{source.name}.<...> are not hyperparameters): rename "
                          f"{source.file or source.module}")
    known = sources.get(source.name)
    if known is not None and (known.module, known.location) != (source.module, source.location) \
            and (known.module != source.module or known.origin == "command line"):
        where = known.location or known.module
        raise ConfigError(f"{text} is a recipe named {source.name}, and {source.name} is "
                          f"already a recipe ({known.origin}: {where}): rename "
                          f"{source.file or source.module}")
    if known is not None:  # a recipe known already, named by its module or file again
        return known.name
    _load(source)
    _named[source.name] = source
    return source.name


def _command_line_source(text: str) -> RecipeSource:
    """What a module or file named on the command line would be, without importing it."""
    if text.endswith(".py") or "/" in text or "\\" in text:
        path = Path(text).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(f"algo={text}: no such recipe file ({path})")
        if path.suffix != ".py" or not path.stem.isidentifier():
            raise ConfigError(f"algo={text}: a recipe file is a Python module, a .py file "
                              "whose name is an identifier (mybc.py)")
        package = path.parent  # a file inside a package is imported as its module
        parts = [path.stem]
        while (package / "__init__.py").is_file() and package.name.isidentifier():
            parts.insert(0, package.name)
            package = package.parent
        return RecipeSource(path.stem, ".".join(parts), "command line", str(path))
    if not all(part.isidentifier() for part in text.split(".")):
        raise UnknownNameError("algorithm", text, recipe_sources())
    if os.getcwd() not in sys.path:  # as `python -m my_pkg.mybc` finds it
        sys.path.insert(0, os.getcwd())
    parts = text.split(".")
    try:
        found = importlib.util.find_spec(text)
    except ModuleNotFoundError as err:  # a missing parent package, or a package's import
        if err.name not in {".".join(parts[:n]) for n in range(1, len(parts) + 1)}:
            raise _import_error(text, err) from None
        found = None
    except Exception as err:  # a parent package that fails to import
        raise _import_error(text, err) from None
    if found is None:
        raise ConfigError(f"algo={text}: no module {text} can be imported here (install its "
                          "package, or give the recipe's file: algo=path/to/recipe.py)")
    return RecipeSource(text.rpartition(".")[2], text, "command line", text)


def import_recipe(name: str, location: str = "") -> types.ModuleType:
    """The recipe module ``name``, checked against the contract. ``location`` is what its
    command line named (``RecipeSource.location``): a process that runs a run of a recipe
    named on the command line (a worker, another host) imports it again from there."""
    if location and (name not in _named or _named[name].location != location) \
            and name_recipe(location) != name:
        raise ConfigError(f"{location} is not the recipe {name}")
    if name in clashes():
        raise ConfigError(f"algorithm {name}: {clashes()[name]}: rename one of them")
    sources = recipe_sources()
    if name in sources:
        return _load(sources[name])
    if _is_location(name):  # a module or file named where only names are read
        raise ConfigError(f"unknown algorithm {quote(name)}: a module or file is taken as a "
                          "recipe from the command line only (algo=...); a suite names "
                          "recipes by name: built-in ones and those installed with an entry "
                          f"point of the group {ENTRY_POINT_GROUP}")
    raise UnknownNameError("algorithm", name, sources)


def _load(source: RecipeSource) -> types.ModuleType:
    if source.import_root is not None:
        directory = str(source.import_root)
        if directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        module = importlib.import_module(source.module)
    except Exception as err:
        raise _import_error(source.location or source.module, err) from None
    if source.file is not None and Path(module.__file__ or "").resolve() != source.file.resolve():
        raise ConfigError(f"algo={source.location}: the module name {source.module} is already "
                          f"taken by {module.__file__}: rename the recipe's file")
    check_contract(module, source.location or source.module)
    return module


def _import_error(what: str, err: BaseException) -> RecipeImportError:
    """The error of a recipe that raised on import: its own traceback (importlib's frames
    left out) and one line naming it."""
    ours = Path(__file__).resolve().parents[2]  # rlbench/
    frames = [frame for frame in traceback.extract_tb(err.__traceback__)
              if "importlib" not in frame.filename
              and not Path(frame.filename).resolve().is_relative_to(ours)]
    details = "".join(["Traceback (most recent call last):\n",
                       *traceback.format_list(frames),
                       *traceback.format_exception_only(type(err), err)])
    return RecipeImportError(f"the recipe {what} failed to import ({type(err).__name__}: "
                             f"{err}; its traceback is above)", details)


def check_contract(module: types.ModuleType, what: str) -> None:
    """Raise ``ConfigError`` naming what ``module`` lacks of the recipe contract
    (``rlbench.recipe``)."""
    missing = [attr for attr in CONTRACT if not hasattr(module, attr)]
    if missing:
        raise ConfigError(f"{what} is not a recipe: it does not define {', '.join(missing)} "
                          "(the contract is in rlbench.recipe's docstring and the docs page "
                          "\"Your own algorithm\", docs/guide/own-algorithm.md)")
    problems = []
    if module.KIND not in KINDS:
        problems.append(f"KIND must be one of {', '.join(KINDS)}, got {quote(module.KIND)}")
    spaces = module.ACTION_SPACES
    if not isinstance(spaces, tuple | list) or not spaces or any(
            space not in ACTION_SPACES for space in spaces):
        problems.append(f"ACTION_SPACES must be a tuple of {', '.join(ACTION_SPACES)}, got "
                        f"{quote(spaces)}")
    if not (isinstance(module.Config, type) and dataclasses.is_dataclass(module.Config)):
        problems.append("Config must be a dataclass of hyperparameters")
    if not isinstance(module.FAMILY_DEFAULTS, dict):
        problems.append("FAMILY_DEFAULTS must be a dict {env family: {field: value}}")
    problems += [f"{attr} must be a function" for attr in ("train", "make_policy")
                 if not callable(getattr(module, attr))]
    if problems:
        raise ConfigError(f"{what} is not a recipe: {'; '.join(problems)}")
