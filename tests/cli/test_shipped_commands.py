"""The commands a wheel user finds the shipped files with: `posttrain docs`, `posttrain recipes copy` of one file, and
the checks `posttrain demo` makes before it starts (in-process; the demo itself runs in tests/e2e/test_wheel.py)."""

from pathlib import Path

from posttrain.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_docs_lists_every_page_with_its_title(capsys):
    assert main(["docs"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(list((REPO / "docs").rglob("*.md")))
    assert any(line.split() == ["guides/grpo", "GRPO", "and", "GSPO"] for line in listed), listed


def test_docs_prints_a_page_or_where_it_is(capsys):
    assert main(["docs", "own-model-data-reward"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "guides" / "own-model-data-reward.md").read_text()
    assert main(["docs", "results/demo", "--path"]) == 0
    assert Path(capsys.readouterr().out.strip()).resolve() == REPO / "docs" / "results" / "demo.md"


def test_an_unknown_or_ambiguous_page_is_exit_2_with_the_near_names(capsys, tmp_path, monkeypatch):
    assert main(["docs", "gpro"]) == 2
    assert "no docs page 'gpro' (did you mean grpo?); `posttrain docs` lists them" in capsys.readouterr().err
    from posttrain.commands import docs

    two = {"guides/index": tmp_path / "a.md", "results/index": tmp_path / "b.md"}
    monkeypatch.setattr(docs, "pages", lambda: two)
    assert main(["docs", "index"]) == 2
    assert "ambiguous: guides/index, results/index" in capsys.readouterr().err


def test_recipes_copy_takes_one_shipped_file_and_never_replaces_one(capsys, tmp_path):
    assert main(["recipes", "copy", "examples/rewards/my_reward.py", str(tmp_path)]) == 0
    copied = tmp_path / "examples" / "rewards" / "my_reward.py"
    assert copied.read_text() == (REPO / "examples" / "rewards" / "my_reward.py").read_text()
    assert capsys.readouterr().out.strip() == f"wrote {copied}"
    copied.write_text("# mine")
    assert main(["recipes", "copy", "examples/rewards/my_reward.py", str(tmp_path)]) == 2
    assert "exists already" in capsys.readouterr().err and copied.read_text() == "# mine"
    assert main(["recipes", "copy", "examples/rewards/nope.py", str(tmp_path)]) == 2
    assert "no shipped recipe or file 'examples/rewards/nope.py'" in capsys.readouterr().err


def test_demo_refuses_a_used_folder_and_the_keys_it_chains_before_anything_runs(capsys, tmp_path):
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "old.txt").write_text("a previous demo")
    assert main(["demo", "--out", str(tmp_path / "runs" / "demo")]) == 2
    assert "not a new or empty folder" in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path / "new"), "training.output_dir=elsewhere"]) == 2
    assert "drop 'training.output_dir=elsewhere'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
