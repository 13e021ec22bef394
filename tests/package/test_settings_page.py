"""docs/settings.md lists every setting of the package as the code defines it: its generated reference
is the one ``python -m tests.helpers.settings_page`` draws from the settings classes now (regenerate it
with ``--write``), it has a section for every settings class ``contextsieve`` exports, and every field
of ``AgentSettings`` is described there.

The reference is drawn in a process of its own: drawing it imports every module of the package
(Numba, ONNX Runtime, the framework integrations), which the tests of light imports must not see.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from tests.helpers.settings_page import BEGIN, END, PAGE, ROOT, SUFFIXES, UNDESCRIBED, generated_part


@pytest.fixture(scope="module")
def drawn() -> subprocess.CompletedProcess[str]:
    """``python -m tests.helpers.settings_page``: the reference on stdout, its notes on stderr."""
    return subprocess.run(
        [sys.executable, "-m", "tests.helpers.settings_page"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
    )


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _section(page: str, name: str) -> str:
    """The generated section of class ``name`` (from its heading to the next one)."""
    m = re.search(rf"^### {name}\n(.*?)(?=^### |{re.escape(END)})", page, flags=re.S | re.M)
    assert m, f"docs/settings.md has no section for {name}"
    return m.group(1)


def test_the_generated_reference_is_current(drawn: subprocess.CompletedProcess[str]) -> None:
    """The text between the page's markers is what the helper draws from the code now."""
    skipped = [line for line in drawn.stderr.splitlines() if line.startswith("settings_page: skipped")]
    if skipped:
        pytest.skip("modules the reference reads could not be imported: " + "; ".join(skipped))
    page = _page()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    assert generated_part(page) == drawn.stdout, "docs/settings.md: run python -m tests.helpers.settings_page --write"


def test_every_exported_settings_class_has_a_section() -> None:
    """Each settings class of ``contextsieve.__all__`` (a name ending in Config, Settings or Options)
    has its own section in the generated reference."""
    import contextsieve

    exported = sorted(n for n in contextsieve.__all__ if n.endswith(SUFFIXES))
    assert exported, "contextsieve exports no settings class?"
    reference = generated_part(_page())
    assert [n for n in exported if not re.search(rf"^### {n}$", reference, flags=re.M)] == []


def test_every_agent_settings_field_is_described() -> None:
    """AgentSettings' table has a row per field, each with what the field governs (its docstring's
    ``Attributes:`` entry), none left "(not described)"."""
    from contextsieve.agent.settings import AgentSettings

    section = _section(generated_part(_page()), "AgentSettings")
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]*\| (.*) \|$", section, flags=re.M))
    assert list(rows) == [f.name for f in dataclasses.fields(AgentSettings)]
    assert [name for name, said in rows.items() if said == UNDESCRIBED] == []
