"""Write ``docs/keys.md``, the key reference of every command, from the commands' tables.

    python -m tools.docs.keys
"""

from __future__ import annotations

from pathlib import Path

from rlbench.harness.plan.command_keys import key_reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "keys.md"


def main() -> None:
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(key_reference())
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
