"""Every test module has a name of its own: tests/ has no __init__.py packages, so pytest imports each module by its
basename, and a second test_x.py elsewhere is collected in the first one's place (an ERROR, and the second
file's tests never run)."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1], sorted(
        str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if names[p.name] > 1)
