"""The leaderboard of the reference runs: ``rlbench publish`` over the committed stores
(``results/reference/store/*.db.gz``), each unpacked into a scratch directory first.
``make docs`` builds it into the site and ``make leaderboard`` on its own; the repository
keeps the stores, not the generated pages."""

from __future__ import annotations

import contextlib
import gzip
import io
import shutil
import sys
from pathlib import Path

STORES = Path(__file__).resolve().parents[2] / "results" / "reference" / "store"


def publish_reference_stores(scratch: Path, output: Path, *, echo: bool = True) -> None:
    """Unpack every committed store under ``scratch`` and publish them all to ``output``.
    ``echo=False`` keeps publish's lines to itself (they would name ``output``, which a
    caller building a larger site removes), but for those of a failure."""
    from rlbench.cli import main  # deferred: torch and MLflow load only when it publishes

    out_dirs = []
    for store in sorted(STORES.glob("*.db.gz")):
        out_dir = scratch / store.name.removesuffix(".db.gz")
        out_dir.mkdir(parents=True)
        with gzip.open(store) as packed, (out_dir / "mlflow.db").open("wb") as unpacked:
            shutil.copyfileobj(packed, unpacked)
        out_dirs.append(str(out_dir))
    printed = io.StringIO()
    with contextlib.redirect_stdout(sys.stdout if echo else printed), \
            contextlib.redirect_stderr(sys.stderr if echo else printed):
        status = main(["publish", f"out_dir={','.join(out_dirs)}", f"output={output}"])
    if status != 0:
        raise RuntimeError(f"rlbench publish over {STORES} exited {status}: "
                           f"{printed.getvalue()[-2000:]}")


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("output", type=Path, help="the directory the site is written to")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlbench-leaderboard-") as scratch:
        publish_reference_stores(Path(scratch), arguments.output)
