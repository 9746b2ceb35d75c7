"""Nothing imports up, and nothing imports in a circle: an import-graph check over src/posttrain
(module-level AND the lazy imports inside functions, since those run too: a circle closed by a lazy
import is still two modules that cannot be understood, tested or moved one without the other).
Each package has a floor; a module may import its own package and packages on lower floors only,
so a lower floor never knows about a higher one; and inside a package the modules' imports form no
cycle: what two modules share lives in a third that both import (algorithms/common.py,
models/sources.py, models/tiny_parts.py, recipe/problems.py, recipe/section.py, tools/checks.py)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "posttrain"

# floor of each top-level package or module of posttrain (0 = bottom)
FLOORS = {
    "__init__": 0, "errors": 0,
    "secrets": 1, "log": 1, "checkpoints": 1, "locks": 1, "user_code": 1, "flag_types": 1, "internals": 1, "shipped": 1,
    "net": 2,
    "storage": 3,
    "models": 4, "rewards": 4, "monitoring": 4, "distributed": 4,
    "data": 5, "tools": 5,
    "generation": 6,
    "evaluation": 7,
    "recipe": 8, "tracking": 8,
    "algorithms": 9, "migrate": 9, "experiment": 9,
    "commands": 10,
    "cli": 11,
    "__main__": 12, "cli_reference": 12,  # cli_reference: the Commands page, generated from cli.build_parser
}

# The rules the design names explicitly (each also follows from the floors above).
FORBIDDEN = [
    ("data", "evaluation", "the prompt texts live in data/ (data/task_prompts.py)"),
    ("data", "recipe", "data/ reads specs it is given; looks_local lives in data/splits.py"),
    ("generation.api", "generation.local", "shared helpers live in generation/base.py"),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported posttrain module, line) for every import statement."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    targets = [".".join(base + ([node.module] if node.module else []))]
                else:
                    targets = [node.module or ""]
                # `from package import module` imports the module too
                targets += [f"{targets[0]}.{alias.name}" for alias in node.names if f"{targets[0]}.{alias.name}" in _modules()]
            else:
                continue
            found += [(module, t, node.lineno) for t in targets if t == "posttrain" or t.startswith("posttrain.")]
    return found


@functools.cache
def _modules() -> frozenset[str]:
    return frozenset(_module_name(path) for path in SRC.rglob("*.py"))


def _owner(target: str) -> str | None:
    """The posttrain module an import target names (`posttrain.x.y.NAME` -> `posttrain.x.y`)."""
    while target and target not in _modules():
        target = target.rpartition(".")[0]
    return target or None


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in _modules()}
    for source, target, _line in imports():
        owner = _owner(target)
        if owner is not None and owner != source and not source.startswith(owner + "."):  # a package's own __init__ is no cycle
            graph[source].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circles_between_modules():
    """Within a package as between packages: no module reaches itself through imports (lazy ones included)."""
    found = cycles(import_graph())
    assert not found, "import circles (move what the modules share into a third module both import):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_circle_check_finds_circles():
    """The checker itself, on a made-up graph: a 3-cycle and a 2-cycle found, a chain is not a cycle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert ("posttrain.algorithms.run", "posttrain.algorithms.run_data") in {(s, _owner(t)) for s, t, _ in imports()}


def test_algorithm_rows_name_modules_that_exist():
    """The algorithm table names its builder and section by string (it imports nothing): each must exist."""
    from posttrain.recipe.algorithms import ALGORITHMS

    for name, row in ALGORITHMS.items():
        assert f"posttrain.algorithms.{row.builder}" in _modules(), f"{name}: no builder module {row.builder}"
        module, _, cls = row.section.partition(":")
        assert module in _modules() and module.startswith("posttrain.recipe."), f"{name}: section {row.section}"
        source = (SRC.parent / (module.replace(".", "/") + ".py")).read_text()
        assert f"class {cls}(" in source, f"{name}: no class {cls} in {module}"
        assert "def build_trainer(run" in (SRC / "algorithms" / f"{row.builder}.py").read_text()


def floor_key(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_floor():
    names = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert names <= set(FLOORS), f"give these a floor in FLOORS: {sorted(names - set(FLOORS))}"


def test_nothing_imports_up():
    upward = []
    for source, target, line in imports():
        a, b = floor_key(source), floor_key(target)
        if a != b and FLOORS[b] >= FLOORS[a]:
            upward.append(f"{source}:{line} imports {target} ({a} is on floor {FLOORS[a]}, {b} on {FLOORS[b]})")
    assert not upward, "imports that run up (or sideways) the layers:\n" + "\n".join(upward)


def test_the_named_rules_hold():
    broken = [f"{s}:{line} imports {t}: {why}" for s, t, line in imports() for low, high, why in FORBIDDEN
              if (s == f"posttrain.{low}" or s.startswith(f"posttrain.{low}."))
              and (t == f"posttrain.{high}" or t.startswith(f"posttrain.{high}."))]
    assert not broken, "\n".join(broken)


def test_the_check_sees_lazy_and_relative_imports():
    """The checker itself: function-level imports and relative imports are found and resolved."""
    found = {(s, t) for s, t, _ in imports()}
    assert ("posttrain.data.sources", "posttrain.storage.cache") in found  # inside a function
    assert ("posttrain.data.sources", "posttrain.data.splits") in found  # relative: from .splits import


def _code_lines(path: Path) -> list[str]:
    """Source lines outside docstrings and comments (what the program does, not what it says)."""
    tree = ast.parse(path.read_text())
    doc_lines = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return [line.split("#")[0] for n, line in enumerate(path.read_text().splitlines(), 1) if n not in doc_lines]


def test_shared_code_lives_in_one_place():
    """One checkpoint-N rule, one table of TRL config classes, one data reader."""
    owners = {
        "checkpoint-(": "checkpoints.py", 'f"checkpoint-{': "checkpoints.py",  # the name rule
        '"SFTConfig"': "recipe/algorithms.py",  # the config-class table
        "load_dataset(": "data/sources.py", "DictReader(": "data/sources.py", "parquet.read_table(": "data/sources.py",
    }
    found = {}
    for path in SRC.rglob("*.py"):
        code = "\n".join(_code_lines(path))
        for needle in owners:
            if needle in code:
                found.setdefault(needle, set()).add(path.relative_to(SRC).as_posix())
    found.get('"SFTConfig"', set()).discard("internals.py")  # there: the owner of a field TRL reads, not a config table
    strays = {needle: sorted(paths - {owners[needle]}) for needle, paths in found.items() if paths - {owners[needle]}}
    assert not strays, f"written outside its one home: {strays}"
    assert found['"SFTConfig"'] == {"recipe/algorithms.py"} and found["checkpoint-("] == {"checkpoints.py"}


def test_checkpoint_name_rule(tmp_path):
    from posttrain.checkpoints import checkpoint_dirs, checkpoint_name, step_of

    for name in ("checkpoint-10", "checkpoint-2", "checkpoint-x", "checkpoint-3.tmp", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-7").write_text("a file, not a checkpoint")
    assert checkpoint_dirs(tmp_path) == [(2, tmp_path / "checkpoint-2"), (10, tmp_path / "checkpoint-10")]
    assert (checkpoint_name(12), step_of("checkpoint-12"), step_of("checkpoint-")) == ("checkpoint-12", 12, None)
    assert checkpoint_dirs(tmp_path / "missing") == []
