"""Deep Compression's storage accounting (Han et al., ICLR 2016): relative-index sparse encoding and Huffman coding.

numpy only. A weight tensor is stored in one of three value forms:
- fp32: many distinct float values, 32 bits each;
- codebook: at most 256 distinct float values (weight sharing), each weight an index into a table of
  32-bit centroids; zero (pruned, and the sparse format's filler) is one more symbol;
- integer: an int8/uint8 tensor (quantized weights), 8 bits each.
Sparse form (the paper's): for every non-zero, the gap to the previous one in `index_bits` bits; a
gap longer than the span 2**index_bits is bridged by filler zeros. Huffman codes then replace the
fixed-width values and gaps. Sizes are exact bit counts; tables (codebook, Huffman code lengths) are counted.
"""

from __future__ import annotations

import gzip
import heapq
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit import registry
from edgekit.imports import import_attr

CODEBOOK_LIMIT = 256  # a float tensor with at most this many distinct values (each used 4+ times on average) is a codebook
INDEX_BITS = {"conv": 8, "fc": 5}  # the paper's relative-index widths (Section 2)
FLOAT_BITS = 32


@dataclass(frozen=True)
class Huffman:
    """A canonical Huffman code over integer symbols."""

    lengths: dict[int, int]  # symbol -> code length in bits

    @classmethod
    def fit(cls, symbols: np.ndarray) -> Huffman:
        values, counts = np.unique(np.asarray(symbols).ravel(), return_counts=True)
        if len(values) == 0:
            return cls({})
        if len(values) == 1:
            return cls({int(values[0]): 1})
        lengths = dict.fromkeys((int(v) for v in values), 0)
        heap = [(int(c), i, [int(v)]) for i, (v, c) in enumerate(zip(values, counts, strict=True))]
        heapq.heapify(heap)
        tie = len(heap)
        while len(heap) > 1:
            c1, _, s1 = heapq.heappop(heap)
            c2, _, s2 = heapq.heappop(heap)
            for s in s1 + s2:
                lengths[s] += 1
            heapq.heappush(heap, (c1 + c2, tie, s1 + s2))
            tie += 1
        return cls(lengths)

    def codes(self) -> dict[int, str]:
        """Canonical codes: by (length, symbol), each the previous code plus one, shifted to its length."""
        codes, code, previous = {}, 0, 0
        for symbol, length in sorted(self.lengths.items(), key=lambda item: (item[1], item[0])):
            code <<= length - previous
            codes[symbol] = format(code, f"0{length}b")
            code, previous = code + 1, length
        return codes

    def bits(self, symbols: np.ndarray) -> int:
        """Coded payload size: the sum of code lengths (no table)."""
        values, counts = np.unique(np.asarray(symbols).ravel(), return_counts=True)
        return int(sum(int(c) * self.lengths[int(v)] for v, c in zip(values, counts, strict=True)))

    def table_bits(self, symbol_bits: int) -> int:
        """The canonical code as stored: a 5-bit length per symbol of the alphabet, or per used symbol with the symbol."""
        return min(len(self.lengths) * (symbol_bits + 5), 5 << symbol_bits if symbol_bits <= 16 else 1 << 62)

    def encode(self, symbols: np.ndarray) -> tuple[bytes, int]:
        """(packed bytes, number of bits)."""
        codes = self.codes()
        text = "".join(codes[int(s)] for s in np.asarray(symbols).ravel())
        return np.packbits(np.frombuffer(text.encode(), np.uint8) - ord("0")).tobytes(), len(text)

    def decode(self, data: bytes, nbits: int) -> np.ndarray:
        lookup = {code: symbol for symbol, code in self.codes().items()}
        bits = np.unpackbits(np.frombuffer(data, np.uint8))[:nbits]
        out, current = [], ""
        for bit in bits:
            current += "1" if bit else "0"
            if current in lookup:
                out.append(lookup[current])
                current = ""
        return np.asarray(out, np.int64)


def relative_index(flat: np.ndarray, index_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Sparse encoding of a 1-D array: (gaps, values) per stored entry, gaps in 1..2**index_bits.

    Each non-zero is stored with its distance to the previous stored entry; a distance beyond the span is
    bridged with filler entries (gap = span, value 0). The stored gap field is `gap - 1`.
    """
    span = 1 << index_bits
    flat = np.asarray(flat).ravel()
    positions = np.flatnonzero(flat)
    gaps = np.diff(positions, prepend=-1)
    fillers = (gaps - 1) // span
    counts = fillers + 1
    last = np.cumsum(counts) - 1
    out_gaps = np.full(int(counts.sum()), span, np.int64)
    out_values = np.zeros(int(counts.sum()), flat.dtype)
    out_gaps[last] = gaps - fillers * span
    out_values[last] = flat[positions]
    return out_gaps, out_values


def from_relative_index(gaps: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Inverse of `relative_index` for an array of `size` elements."""
    out = np.zeros(size, values.dtype)
    out[np.cumsum(gaps) - 1] = values
    return out


def symbols_of(weight: np.ndarray) -> tuple[np.ndarray, str, int, int]:
    """(integer symbols with 0 meaning zero, value form, value bits, codebook bits) for a weight tensor."""
    weight = np.asarray(weight)
    if np.issubdtype(weight.dtype, np.integer):
        return weight.astype(np.int64), "integer", 8 * weight.dtype.itemsize, 0
    nonzero = weight[weight != 0]
    distinct = np.unique(nonzero)
    if len(distinct) <= CODEBOOK_LIMIT and 4 * len(distinct) <= len(nonzero):  # values really shared
        symbols = np.zeros(weight.shape, np.int64)
        symbols[weight != 0] = np.searchsorted(distinct, nonzero) + 1  # 0 is zero
        return symbols, "codebook", _index_width(len(distinct)), len(distinct) * FLOAT_BITS
    per_channel = _channel_codebooks(weight)
    if per_channel is not None:
        return per_channel
    positive_zero = np.where(weight == 0, np.float32(0), weight).astype(np.float32)  # -0.0 is a zero too
    return positive_zero.view(np.int32).astype(np.int64), "fp32", FLOAT_BITS, 0


def _channel_codebooks(weight: np.ndarray):
    """Shared values per output channel (what folding a per-channel scale, e.g. batch norm, leaves of a layer codebook), or None."""
    if weight.ndim < 2:
        return None
    rows = weight.reshape(weight.shape[0], -1)
    books = [np.unique(row[row != 0]) for row in rows]
    most, total = max(len(b) for b in books), sum(len(b) for b in books)
    if most > CODEBOOK_LIMIT or 4 * total > np.count_nonzero(rows):
        return None
    symbols = np.zeros(rows.shape, np.int64)
    for i, (row, book) in enumerate(zip(rows, books, strict=True)):
        symbols[i, row != 0] = np.searchsorted(book, row[row != 0]) + 1
    return symbols.reshape(weight.shape), "codebook per channel", _index_width(most), total * FLOAT_BITS


def _index_width(distinct: int) -> int:
    return max(1, math.ceil(math.log2(distinct + 1)))  # the distinct values and zero


def tensor_storage(weight: np.ndarray, index_bits: int) -> dict:
    """Every storage figure of one weight tensor: dense, sparse (relative index), Huffman-coded, gzip. Bytes, rounded up."""
    symbols, form, value_bits, codebook_bits = symbols_of(weight)
    flat = symbols.ravel()
    params, nonzeros = flat.size, int(np.count_nonzero(flat))
    gaps, values = relative_index(flat, index_bits)
    dense_bits = params * value_bits + codebook_bits
    sparse_bits = len(gaps) * (value_bits + index_bits) + codebook_bits
    index_code = Huffman.fit(gaps)
    index_coded = index_code.bits(gaps) + index_code.table_bits(index_bits)
    if form == "fp32":
        weight_coded = len(values) * FLOAT_BITS  # distinct floats: nothing for Huffman to share
        dense_coded = dense_bits
    else:
        weight_code = Huffman.fit(values)
        weight_coded = weight_code.bits(values) + weight_code.table_bits(value_bits)
        all_code = Huffman.fit(flat)
        dense_coded = all_code.bits(flat) + all_code.table_bits(value_bits) + codebook_bits
    sparse_coded = weight_coded + index_coded + codebook_bits
    coded_form = "sparse" if sparse_coded < dense_coded else "dense"
    stored = _stored_bytes(np.asarray(weight), symbols, form)
    return {
        "parameters": params,
        "nonzeros": nonzeros,
        "form": form,
        "bits": value_bits,
        "index_bits": index_bits,
        "dense_bytes": _bytes(dense_bits),
        "sparse_bytes": _bytes(sparse_bits),
        "weight_coded_bytes": _bytes(weight_coded + codebook_bits if coded_form == "sparse" else dense_coded),
        "index_coded_bytes": _bytes(index_coded) if coded_form == "sparse" else 0,
        "coded_bytes": _bytes(min(sparse_coded, dense_coded)),
        "coded_form": coded_form,
        "gzip_bytes": len(gzip.compress(stored, compresslevel=9)),
    }


def _stored_bytes(weight: np.ndarray, symbols: np.ndarray, form: str) -> bytes:
    """The tensor as a plain dump (what gzip sees): fp32 values, one byte per codebook index + the codebook, or the integers."""
    if form == "fp32":
        return weight.astype(np.float32).tobytes()
    if form.startswith("codebook"):
        return symbols.astype(np.uint8).tobytes() + np.unique(weight[weight != 0]).astype(np.float32).tobytes()
    return weight.tobytes()


def _bytes(bits: int) -> int:
    return (int(bits) + 7) // 8


def index_bits_for(name: str, weight: np.ndarray) -> int:
    """The paper's relative-index width: 8 bits for conv kernels, 5 bits for fully connected layers."""
    return INDEX_BITS["conv" if np.ndim(weight) > 2 else "fc"]


SUMMED = ("parameters", "nonzeros", "dense_bytes", "sparse_bytes", "weight_coded_bytes", "index_coded_bytes", "coded_bytes", "gzip_bytes")


def storage_table(weights: dict[str, np.ndarray], others: dict[str, np.ndarray] | None = None) -> dict:
    """Per-layer storage of `weights` (name -> tensor) plus a total; `others` (biases, norms) are counted as fp32 dense.

    The total's ratio is the paper's: fp32 bytes of every parameter / coded bytes.
    """
    layers = [{"layer": name, **tensor_storage(w, index_bits_for(name, w))} for name, w in weights.items()]
    other_count = sum(int(np.size(v)) for v in (others or {}).values())
    other_bytes = 4 * other_count
    total = {key: sum(layer[key] for layer in layers) for key in SUMMED}
    total["parameters"] += other_count
    total["nonzeros"] += sum(int(np.count_nonzero(v)) for v in (others or {}).values())
    for key in ("dense_bytes", "sparse_bytes", "coded_bytes", "gzip_bytes"):
        total[key] += other_bytes
    total["other_parameters"] = other_count
    total["bits"] = 8 * total["dense_bytes"] / max(total["parameters"], 1)
    total["coded_bits"] = 8 * total["coded_bytes"] / max(total["parameters"], 1)
    total["ratio"] = 4 * total["parameters"] / max(total["coded_bytes"], 1)
    return {"layers": layers, "total": total}


def int8_weights(weight: np.ndarray) -> np.ndarray:
    """Symmetric per-output-channel int8 (the converters' weight scheme): round(w / (max|w| / 127)) per channel."""
    flat = weight.reshape(weight.shape[0], -1).astype(np.float64)
    scale = np.abs(flat).max(axis=1, keepdims=True) / 127
    return np.round(flat / np.where(scale == 0, 1, scale)).astype(np.int8).reshape(weight.shape)


def size_metrics(path) -> dict:
    """The size gate's alternatives for one artifact file: gzip_mb, and coded_mb where its format's backend codes its
    weights as Deep Compression does (the registry's `coded_size`: ONNX); None otherwise."""
    path = Path(path)
    if path.is_dir():
        return {"gzip_mb": None, "coded_mb": None}
    return {"gzip_mb": len(gzip.compress(path.read_bytes(), compresslevel=6)) / 1e6, "coded_mb": _coded_mb(path)}


def _coded_mb(path: Path) -> float | None:
    backend = registry.backend(registry.suffix_formats().get(path.suffix, ""))
    return import_attr(backend.coded_size)(path) / 1e6 if backend is not None and backend.coded_size else None
