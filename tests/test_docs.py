"""The generated documentation pages match the code that generates them, and the docs
folder holds what a user looks for."""

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
GENERATED = {
    "docs/numpy_api.md": ("tracejit.tracer.api_table",
                          "python -m tracejit.tracer.api_table > docs/numpy_api.md"),
    "docs/api.md": ("tracejit.runtime.api_reference",
                    "python -m tracejit.runtime.api_reference > docs/api.md"),
}


@pytest.mark.parametrize("page", sorted(GENERATED))
def test_generated_page_is_current(page):
    import importlib

    module, command = GENERATED[page]
    expected = importlib.import_module(module).markdown()
    assert (ROOT / page).read_text() == expected, f"{page} is out of date: run `{command}`"


def test_license_matches_the_declared_license():
    declared = (ROOT / "pyproject.toml").read_text()
    assert 'license = { text = "Apache-2.0" }' in declared
    assert "Apache License" in (ROOT / "docs" / "LICENSE").read_text().splitlines()[0]


@pytest.mark.parametrize("page", ["guide.md", "sharp_bits.md", "CHANGELOG.md"])
def test_docs_pages_exist_and_link_targets_exist(page):
    text = (ROOT / "docs" / page).read_text()
    for name in ("docs/sharp_bits.md", "docs/numpy_api.md", "docs/api.md"):
        if name in text:
            assert (ROOT / name).exists(), f"{page} names {name}, which is missing"
