"""make-tiny-model never replaces a trained model by accident: a folder that is not empty needs --force."""

from posttrain.cli import main


def test_non_empty_folder_needs_force(tmp_path, capsys, isolated_cache):
    out = tmp_path / "m"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"trained weights")
    assert main(["make-tiny-model", str(out)]) == 2
    assert "is not empty" in capsys.readouterr().err and (out / "model.safetensors").read_bytes() == b"trained weights"
    assert main(["make-tiny-model", str(out), "--force"]) == 0
    assert (out / "config.json").is_file() and (out / "model.safetensors").read_bytes() != b"trained weights"
