"""The bundled example capture is what the project's generator makes for its scenario, byte for
byte, so the README's claim that it is generated (and from what) stays true."""

from __future__ import annotations

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO

EXAMPLE = REPO / "examples" / "minigpt-h100-2gpu-cb"


def test_bundled_example_is_the_generators_output(tmp_path):
    generate(SCENARIOS["example-2gpu-cb"], tmp_path)
    bundled = sorted(p.relative_to(EXAMPLE) for p in EXAMPLE.rglob("*")
                     if p.is_file() and p.name != "README.md")
    assert bundled, "the example capture is missing"
    for rel in bundled:
        assert (tmp_path / rel).read_bytes() == (EXAMPLE / rel).read_bytes(), rel
    assert sum((EXAMPLE / rel).stat().st_size for rel in bundled) < 1_000_000
