"""The user's pages (docs/index.md, getting-started.md, guides/) name nothing only a maintainer has: no test file
(`tests/...`) and no source path (`src/posttrain/...`); a wheel user has neither. A module is named as it is
imported (`posttrain.recipe.algorithms`), a claim's test as "a test checks it". The results and reference pages,
and docs/development.md, are for readers of the repository and may name its files."""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
USER_PAGES = [DOCS / "index.md", DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md"))]
MAINTAINER_PATH = re.compile(r"(?<![\w/.-])(?:tests|src/posttrain)/[\w./-]*")


def maintainer_paths(text: str) -> list[str]:
    return MAINTAINER_PATH.findall(text)


def test_the_check_sees_what_it_looks_for():
    assert maintainer_paths("tested (tests/e2e/test_x.py) in `src/posttrain/cli.py`") == ["tests/e2e/test_x.py", "src/posttrain/cli.py"]
    assert maintainer_paths("`posttrain.recipe.algorithms`, latest/tests/x, my_tests/y, the package's `posttrain/recipe/a.json`, "
                            "Axolotl's src/axolotl/utils/") == []


def test_user_pages_name_no_maintainer_path():
    assert len(USER_PAGES) > 20  # the guides are found
    found = [f"{page.relative_to(DOCS)}:{number}: {path}" for page in USER_PAGES
             for number, line in enumerate(page.read_text().splitlines(), 1) for path in maintainer_paths(line)]
    assert found == [], "name the module (posttrain.x.y) or say 'a test checks it' instead:\n" + "\n".join(found)
