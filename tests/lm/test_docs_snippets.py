"""The code blocks of docs/lm.md that promise to run do run, with the shapes they state."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import numpy as np

DOC = Path(__file__).resolve().parents[2] / "docs" / "lm.md"


def python_block(title: str) -> str:
    """The first ```python block under the `## title` heading of docs/lm.md."""
    text = DOC.read_text()
    section = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert section, f"docs/lm.md has no '## {title}' section"
    block = re.search(r"^```python\n(.*?)^```", section.group(1), flags=re.M | re.S)
    assert block, f"'## {title}' has no python block"
    return block.group(1)


def test_small_random_model_snippet_runs() -> None:
    namespace: dict = {}
    exec(compile(python_block("A small random model for experiments"), str(DOC), "exec"), namespace)
    params = namespace["params"]
    n_params = sum(np.asarray(x).size for x in jax.tree.leaves(params))
    assert 100_000 < n_params < 110_000, n_params  # "about 107k parameters"
    assert namespace["logits"].shape == (2, 8, 256)
    assert np.isfinite(np.asarray(namespace["logits"])).all()
    assert namespace["out"].tokens.shape == (2, 16)
