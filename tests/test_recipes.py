"""The recipes of docs/architecture.md run as written (every ``python`` block of its
"Recipes" section, in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def recipe_blocks() -> list[str]:
    text = DOC.read_text()
    recipes = text[text.index("## Recipes") :]
    return re.findall(r"```python\n(.*?)```", recipes, flags=re.S)


def test_architecture_recipes_run():
    blocks = recipe_blocks()
    assert len(blocks) == 3
    namespace: dict = {"__name__": "recipes"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    assert "UNIGRAM" not in namespace["harness"].resolve_models(["all"])  # the recipe cleaned up
