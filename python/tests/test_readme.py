"""The examples of python/README.md run as written."""

import re
from pathlib import Path


def test_readme_examples_run(capsys):
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "(2, 8, 15, 14)" in printed
    assert "ConvTranspose2d(16, 8, kernel_size=(3, 3)" in printed
