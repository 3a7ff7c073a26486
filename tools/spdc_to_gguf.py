#!/usr/bin/python3
"""Write specdec's example GPTs as GGUF files that llama.cpp runs with its `gpt2` architecture.

  convert  a shipped .spdc model (models/kjv-*.spdc, format in models/README.md):
    /usr/bin/python3 tools/spdc_to_gguf.py convert models/kjv-target.spdc kjv-target-f16.gguf
    /usr/bin/python3 tools/spdc_to_gguf.py convert --outtype f32 models/kjv-draft.spdc \
        kjv-draft-f32.gguf
    /usr/bin/python3 tools/spdc_to_gguf.py convert --outtype q4_0 models/kjv-draft.spdc \
        kjv-draft-q4_0.gguf
           with N unused tokens appended (--pad N, see "Padding" below):
    /usr/bin/python3 tools/spdc_to_gguf.py convert --pad 32 models/kjv-draft.spdc \
        kjv-draft-padded-f16.gguf
           a model of a byte-level BPE's ids, with that BPE as its vocabulary (--tokenizer, see
           "BPE vocabulary" below):
    /usr/bin/python3 tools/spdc_to_gguf.py convert --tokenizer models/kjv-bpe.tokenizer \
        models/kjv-bpe-draft.spdc kjv-bpe-draft-f16.gguf
  random   a GPT of any shape with random weights (fixed seed), e.g. the one-layer pair of the
           exactness tests or a ~1B-parameter model for timing a memory-bound target:
    /usr/bin/python3 tools/spdc_to_gguf.py random tiny-target.gguf --vocab 16 --layers 1 \
        --d-model 32 --heads 2 --d-ff 64 --context 128 --seed 1
    /usr/bin/python3 tools/spdc_to_gguf.py random gpt2-1b-f16.gguf --vocab 256 --layers 20 \
        --d-model 2048 --heads 16 --d-ff 8192 --context 2048 --seed 1

gguf-py is llama.cpp's own (scripts/install-llama-cpp.sh installs it as
<prefix>/share/llama.cpp/gguf-py): `--gguf-py DIR`, else $SPECDEC_GGUF_PY, else whatever
`import gguf` finds. It needs NumPy (>= 1.24 works) and PyYAML; Debian: python3-numpy python3-yaml.
Run it with /usr/bin/python3.

The example GPT is GPT-2 exactly: pre-LN blocks, learned positions, LayerNorm eps 1e-5, causal
attention scaled by 1/sqrt(head_dim) with head h owning dimensions [h*head_dim, (h+1)*head_dim) of
q, k and v, GELU (tanh approximation), biases everywhere, output tied to the token embedding.
Tensor mapping (.spdc row-major [out, in] = GGUF/numpy shape; ggml lists the dimensions reversed):
  wte           [vocab, d]      -> token_embd.weight      (also the output head: no output.weight,
                                                           llama.cpp's gpt2 loader then reuses it)
  wpe           [context, d]    -> position_embd.weight
  layer N  ln1.weight/.bias     -> blk.N.attn_norm.weight/.bias
           qkv.weight [3d, d]   -> blk.N.attn_qkv.weight   rows [q; k; v], as llama.cpp splits them
           qkv.bias   [3d]      -> blk.N.attn_qkv.bias
           proj.weight/.bias    -> blk.N.attn_output.weight/.bias
           ln2.weight/.bias     -> blk.N.ffn_norm.weight/.bias
           fc1.weight [d_ff, d] -> blk.N.ffn_up.weight,   fc1.bias -> blk.N.ffn_up.bias
           fc2.weight [d, d_ff] -> blk.N.ffn_down.weight, fc2.bias -> blk.N.ffn_down.bias
  ln_f.weight/.bias             -> output_norm.weight/.bias
Matrices and embeddings are stored as f16 (the .spdc values bit for bit) or, with --outtype f32,
as f32; norms and biases are always f32, as llama.cpp's own converters store 1-D tensors.
--outtype q8_0 / q4_0 quantize the weight matrices and the token embedding (also the output head)
with gguf-py's quantizers (gguf.quants: the same blocks llama.cpp's C quantizer writes; every
tensor in the one type, like `llama-quantize --pure`), the position embedding kept f16. These are
the formats CPU users of llama.cpp run. No K-quant: gguf-py can dequantize K-quants but not write
them, and an approximation of llama.cpp's K-quant search would not be the format users run.
Hyper-parameters: gpt2.context_length = the number of learned positions, embedding_length = d,
feed_forward_length = d_ff, block_count, attention.head_count, attention.layer_norm_epsilon = 1e-5.

Vocabulary: byte level, token id = byte value (ids 0..vocab-1 are bytes 0..vocab-1), written as a
`gpt2` BPE tokenizer whose tokens are GPT-2's printable stand-ins for the bytes (bytes_to_unicode,
e.g. 0x20 -> "Ġ", 0x0A -> "Ċ"). llama.cpp refuses a BPE vocabulary without merges, so there is one
merge, of the bytes 0xFE and 0xFF: they never occur in UTF-8, and llama.cpp replaces invalid UTF-8
with U+FFFD before byte-encoding, so the merge can never apply and every text tokenizes to its
bytes. (Text must be valid UTF-8 for that: an invalid byte becomes the three bytes of U+FFFD.)
The pre-tokenizer is "trillion": llama.cpp splits with GPT-2's own regex for it (the split does not
matter without merges) and, unlike for "gpt-2", does not "clean up" spaces on detokenization
(" ." -> "."), so llama_detokenize returns exactly the bytes of the tokens.
No BOS is added (add_bos_token false: the models never saw one). EOS (and BOS, never used) is byte
0x00, NUL: it never occurs in the training text, so the KJV models give it almost no probability
and generation is not cut short, which is how specdec's own decoders run them (no stop token).
llama.cpp logs "special_eos_id is not in special_eog_ids" at load: it expects EOS to have a text
like "<|endoftext|>", and a byte vocabulary has none; it then treats token 0 as end of generation.
A random model with fewer than 256 tokens samples token 0 like any other: run llama.cpp's tools on
it with --ignore-eos.

Padding (--pad N): N tokens "<|pad_0|>".."<|pad_N-1|>" of type UNUSED are appended after the
bytes, as model families pad their vocabularies to a round size (Qwen2.5: 151,936 or 152,064
rows for one tokenizer), with zero rows in the token embedding. The gpt2 architecture ties the
output head to that embedding and has no output bias, so a padding id's logit is exactly 0: it
would carry mass if the padded model were sampled on its own, which specdec never does. A padded
draft is near-identical to its target (llama.cpp's rule), and specdec drafts it through
MappedDraft, whose row is in the target's ids: a padding id has no place in it (a padded target's
padding ids would be -inf), so the draft's law is renormalised over the shared tokens, which is
exactly the unpadded draft's law. A very negative logit instead would need a bias the
architecture lacks (or weights tuned to the final LayerNorm) and would still leave some mass; the
map removes it exactly. --token-text hex writes byte b as "<0xBB>" instead: a test vocabulary
that shares no token text with a byte-level one.

BPE vocabulary (--tokenizer FILE, a .tokenizer file of tools/train/bpe.py, e.g.
models/kjv-bpe.tokenizer; the model's vocab_size must be the tokenizer's): the vocabulary is
written as the GPT-2 BPE it is. Token i's text is its bytes in GPT-2's stand-ins (token " the" ->
"Ġthe"), merges are "left right" in those stand-ins in merge order (merge k makes token 256 + k,
so llama.cpp's merge rank = bpe.py's), every token NORMAL, no BOS added, EOS (and BOS, never
used) byte 0x00 as above. tokenizer.ggml.pre is "gpt-2" (--pre gpt-2, the default): llama.cpp
splits with GPT-2's pattern, which bpe.py's pre-tokenization is on ASCII text (on other text
llama.cpp classifies code points by Unicode category, bpe.py makes every byte >= 0x80 a letter,
and llama.cpp replaces invalid UTF-8). With "gpt-2" llama.cpp's llama_detokenize also "cleans up"
spaces (" ." -> "."; llama_token_to_piece, which specdec uses, never does); --pre trillion selects
the same split without that clean-up, as the byte-level vocabulary does.
"""
import argparse
import math
import os
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPDC_MAGIC = b"SPDCGPT1"
SPDC_VERSION = 2
SPDC_DTYPE_FP16 = 1
SPDC_HEADER_BYTES = 8 + 8 * 4  # magic + version, six dimensions, dtype
SPDC_CHECKSUM_BYTES = 4
# The C++ loader's bounds (examples/gpt/weights.hpp): a garbage header fails here, not in numpy.
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 20
MAX_LAYERS = 1 << 12
MAX_WIDTH = 1 << 18

LAYER_NORM_EPS = 1e-5
BYTE_VOCAB_MAX = 256
EOS_TOKEN = 0  # NUL; see the module docstring
UNUSED_MERGE = (0xFE, 0xFF)  # two bytes that never occur in UTF-8
PRE_TOKENIZER = "trillion"  # GPT-2's regex, no clean-up of spaces on detokenization


class ConversionError(Exception):
    """A bad input file or argument; main() prints it as one line and exits with status 1."""


@dataclass(frozen=True)
class Shape:
    vocab: int
    context: int
    layers: int
    heads: int
    d_model: int
    d_ff: int

    def describe(self):
        return (f"vocab_size {self.vocab}, max_context {self.context}, n_layer {self.layers}, "
                f"n_head {self.heads}, d_model {self.d_model}, d_ff {self.d_ff}")


def tensor_layout(shape):
    """(GGUF tensor name, numpy shape) in .spdc file order."""
    d, f = shape.d_model, shape.d_ff
    layout = [("token_embd.weight", (shape.vocab, d)), ("position_embd.weight", (shape.context, d))]
    for n in range(shape.layers):
        b = f"blk.{n}"
        layout += [(f"{b}.attn_norm.weight", (d,)), (f"{b}.attn_norm.bias", (d,)),
                   (f"{b}.attn_qkv.weight", (3 * d, d)), (f"{b}.attn_qkv.bias", (3 * d,)),
                   (f"{b}.attn_output.weight", (d, d)), (f"{b}.attn_output.bias", (d,)),
                   (f"{b}.ffn_norm.weight", (d,)), (f"{b}.ffn_norm.bias", (d,)),
                   (f"{b}.ffn_up.weight", (f, d)), (f"{b}.ffn_up.bias", (f,)),
                   (f"{b}.ffn_down.weight", (d, f)), (f"{b}.ffn_down.bias", (d,))]
    return layout + [("output_norm.weight", (d,)), ("output_norm.bias", (d,))]


def check_shape(shape, where, max_vocab=BYTE_VOCAB_MAX):
    """Raises ConversionError unless `shape` is one the C++ loader and llama.cpp accept, with at
    most `max_vocab` tokens (256 for the byte-level vocabulary; a BPE's size with --tokenizer)."""
    bounds = [("vocab_size", shape.vocab, MAX_VOCAB), ("max_context", shape.context, MAX_CONTEXT),
              ("n_layer", shape.layers, MAX_LAYERS), ("n_head", shape.heads, MAX_WIDTH),
              ("d_model", shape.d_model, MAX_WIDTH), ("d_ff", shape.d_ff, MAX_WIDTH)]
    for name, value, bound in bounds:
        if not 1 <= value <= bound:
            raise ConversionError(f"{where}: implausible {name} = {value}, expected 1..{bound}")
    if shape.d_model % shape.heads != 0:
        raise ConversionError(f"{where}: d_model = {shape.d_model} is not divisible by "
                              f"n_head = {shape.heads}")
    if shape.vocab > max_vocab:
        if max_vocab != BYTE_VOCAB_MAX:
            raise ConversionError(f"{where}: vocab_size = {shape.vocab}, but the tokenizer has "
                                  f"{max_vocab} tokens")
        raise ConversionError(f"{where}: vocab_size = {shape.vocab}, but the GGUF vocabulary is "
                              f"byte level (token id = byte value), so at most {BYTE_VOCAB_MAX} "
                              "(a model of a BPE's ids needs --tokenizer)")


# ---- reading .spdc -----------------------------------------------------------------------------

def read_spdc(path, max_vocab=BYTE_VOCAB_MAX):
    """Returns (Shape, {GGUF name: float16 array}) of a .spdc version 2 file, checked as the C++
    loader checks it: magic, version, dtype, plausible dimensions, exact size, CRC-32, finite
    values."""
    try:
        blob = Path(path).read_bytes()
    except OSError as e:
        raise ConversionError(f"{path}: cannot read the .spdc file ({e.strerror})") from None
    if blob[:8] != SPDC_MAGIC:
        shown = "".join(chr(c) if 0x20 <= c < 0x7F else "?" for c in blob[:8])
        raise ConversionError(f"{path}: not a .spdc GPT weight file: magic is \"{shown}\", "
                              f"expected \"{SPDC_MAGIC.decode()}\"")
    if len(blob) < SPDC_HEADER_BYTES:
        raise ConversionError(f"{path}: truncated header: {len(blob)} bytes, a .spdc header has "
                              f"{SPDC_HEADER_BYTES}")
    version, vocab, context, layers, heads, d, f, dtype = struct.unpack_from("<8I", blob, 8)
    if version != SPDC_VERSION:
        hint = (" (version 1 has no checksum: convert it with tools/train/export.py --restamp)"
                if version == 1 else "")
        raise ConversionError(f"{path}: unsupported .spdc version {version}, this reader supports "
                              f"version {SPDC_VERSION}{hint}")
    if dtype != SPDC_DTYPE_FP16:
        raise ConversionError(f"{path}: unsupported dtype {dtype}, expected {SPDC_DTYPE_FP16} "
                              "(IEEE fp16)")
    shape = Shape(vocab, context, layers, heads, d, f)
    check_shape(shape, path, max_vocab)

    layout = tensor_layout(shape)
    values = sum(math.prod(dims) for _, dims in layout)
    expected = SPDC_HEADER_BYTES + 2 * values + SPDC_CHECKSUM_BYTES
    if len(blob) != expected:
        problem = "truncated" if len(blob) < expected else "trailing bytes"
        raise ConversionError(f"{path}: {problem}: the header ({shape.describe()}) needs "
                              f"{expected} bytes, the file has {len(blob)}")
    stored = struct.unpack_from("<I", blob, expected - SPDC_CHECKSUM_BYTES)[0]
    actual = zlib.crc32(blob[:expected - SPDC_CHECKSUM_BYTES])
    if stored != actual:
        raise ConversionError(f"{path}: checksum mismatch: the file says {stored:#010x}, its "
                              f"bytes give {actual:#010x} (the file is corrupt)")

    body = np.frombuffer(blob, dtype="<f2", count=values, offset=SPDC_HEADER_BYTES)
    tensors = {}
    at = 0
    for name, dims in layout:
        count = math.prod(dims)
        tensor = body[at:at + count]
        bad = np.flatnonzero(~np.isfinite(tensor))
        if bad.size:
            raise ConversionError(f"{path}: tensor {name} has a non-finite value at index "
                                  f"{bad[0]} (fp16 bits {tensor.view('<u2')[bad[0]]:#06x})")
        tensors[name] = tensor.reshape(dims).astype(np.float16)  # native byte order
        at += count
    return shape, tensors


# ---- random weights ----------------------------------------------------------------------------

def random_tensors(shape, seed):
    """Yields (GGUF name, float32 array) in file order: matrices and embeddings normal with standard
    deviation 1/sqrt(d_in) (d_in = d_model for the embeddings, so logits have a standard deviation
    of about 1), LayerNorm weights 1, every bias 0. One tensor at a time, so a 1B-parameter model
    never sits in memory."""
    rng = np.random.default_rng(seed)
    for name, dims in tensor_layout(shape):
        if len(dims) == 1:
            fill = 1.0 if name.endswith("norm.weight") else 0.0
            yield name, np.full(dims, fill, dtype=np.float32)
        else:
            fan_in = shape.d_model if "embd" in name else dims[1]
            tensor = rng.standard_normal(dims, dtype=np.float32)
            tensor *= np.float32(1.0 / math.sqrt(fan_in))
            yield name, tensor


# ---- writing GGUF ------------------------------------------------------------------------------

def hex_symbols():
    """Byte b written "<0xBB>": a vocabulary that shares no token text with a byte-level one
    (--token-text hex: the disjoint pair of the tests)."""
    return {byte: f"<0x{byte:02X}>" for byte in range(256)}


def byte_symbols():
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    symbols = {}
    extra = 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return symbols


def read_bpe(path):
    """(token bytes list, merges list of (a, b)) of a tools/train/bpe.py .tokenizer file, checked
    as bpe.py and examples/gpt/bpe_tokenizer.hpp check it."""
    try:
        text = Path(path).read_bytes().decode("ascii")
    except OSError as e:
        raise ConversionError(f"{path}: cannot read the tokenizer file ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ConversionError(f"{path}: not a BPE tokenizer file (not ASCII)") from None
    lines = text.split("\n")
    head = lines[0].split(" ")
    if len(head) != 4 or head[0] != "SPDCBPE1" or head[1] != "1":
        raise ConversionError(f"{path}: not a BPE tokenizer file: expected the header "
                              "\"SPDCBPE1 1 <vocab_size> <n_merges>\"")
    try:
        vocab, n = int(head[2]), int(head[3])
        merges = [tuple(int(x) for x in line.split(" ")) for line in lines[1:-1]]
    except ValueError:
        raise ConversionError(f"{path}: a malformed line (expected two token ids)") from None
    if vocab != 256 + n or len(merges) != n or lines[-1] != "":
        raise ConversionError(f"{path}: the header says {n} merges and {vocab} tokens, the file "
                              f"has {len(merges)} merge lines")
    pieces = [bytes([b]) for b in range(256)]
    for k, merge in enumerate(merges):
        if len(merge) != 2 or not all(0 <= t < 256 + k for t in merge):
            raise ConversionError(f"{path}: line {k + 2}: merge {k} {merge} refers to a token "
                                  "id out of range")
        pieces.append(pieces[merge[0]] + pieces[merge[1]])
    if len(set(merges)) != len(merges):
        raise ConversionError(f"{path}: a merge occurs twice")
    return pieces, merges


def import_gguf(gguf_py):
    """llama.cpp's gguf-py package, from `gguf_py`, $SPECDEC_GGUF_PY or the import path."""
    location = gguf_py or os.environ.get("SPECDEC_GGUF_PY")
    if location:
        if not (Path(location) / "gguf" / "__init__.py").is_file():
            raise ConversionError(f"{location}: not llama.cpp's gguf-py directory (expected "
                                  "gguf/__init__.py in it)")
        sys.path.insert(0, str(location))
    try:
        import gguf
    except ImportError as e:
        if e.name in ("numpy", "yaml"):
            raise ConversionError(f"llama.cpp's gguf-py needs the Python module {e.name} "
                                  "(Debian: apt-get install python3-numpy python3-yaml)") from None
        where = location or "the Python path (pass --gguf-py DIR or set SPECDEC_GGUF_PY)"
        raise ConversionError(f"cannot import llama.cpp's gguf-py from {where}: {e}") from None
    return gguf


OUTTYPES = ("f16", "f32", "q8_0", "q4_0")
QUANTIZED = ("q8_0", "q4_0")


def stored_type(gguf, name, dims, outtype):
    """(numpy dtype, GGML quantization type or None) a tensor is stored as: f32 for 1-D tensors
    (norms, biases); with a quantized outtype the weight matrices and the token embedding (which
    is also the output head) in that type, every row quantized in blocks of 32 values by gguf-py's
    own quantizer (gguf.quants, bit for bit what llama.cpp's C quantizer writes for these types),
    and the position embedding kept f16 (a table read one row per position, not a matmul
    weight: llama.cpp's converters never quantize it); otherwise the chosen float type."""
    if len(dims) == 1 or outtype == "f32":
        return np.dtype(np.float32), None
    if outtype in QUANTIZED and name != "position_embd.weight":
        qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0,
                 "q4_0": gguf.GGMLQuantizationType.Q4_0}[outtype]
        return np.dtype(np.uint8), qtype
    return np.dtype(np.float16), None


def file_type(gguf, outtype):
    return {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
            "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
            "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[outtype]


def check_quantizable(gguf, shape, outtype):
    """Raises ConversionError unless every quantized row splits into whole blocks."""
    if outtype not in QUANTIZED:
        return
    for name, dims in tensor_layout(shape):
        dtype, qtype = stored_type(gguf, name, dims, outtype)
        block = gguf.GGML_QUANT_SIZES[qtype][0] if qtype is not None else 1
        if dims[-1] % block != 0:
            raise ConversionError(f"--outtype {outtype}: tensor {name} has rows of {dims[-1]} "
                                  f"values, not a multiple of the {block}-value block of "
                                  f"{outtype.upper()} (use f16 or f32 for this shape)")


def pad_token(i):
    """The text of padding token i, as model families name theirs."""
    return f"<|pad_{i}|>"


def padded(shape, tensors, pad):
    """(Shape with `pad` more tokens, the tensors with `pad` zero rows appended to the token
    embedding). The embedding is also the output head (tied), so a padding id's logit is exactly
    0: see the module docstring, "Padding"."""
    if pad == 0:
        return shape, tensors
    grown = Shape(shape.vocab + pad, shape.context, shape.layers, shape.heads, shape.d_model,
                  shape.d_ff)

    def rows():
        for name, tensor in tensors:
            if name == "token_embd.weight":
                tensor = np.concatenate([tensor, np.zeros((pad, tensor.shape[1]), tensor.dtype)])
            yield name, tensor
    return grown, rows()


def write_gguf(gguf, path, shape, model_name, tensors, outtype, pad=0, token_text="bytes",
               bpe=None, pre="gpt-2"):
    """Writes `tensors`, an iterable of (name, array) in tensor_layout(shape) order, streaming one
    tensor at a time, with `pad` unused tokens appended (padded()); the file appears under `path`
    only once complete. `bpe` = read_bpe()'s (pieces, merges): the vocabulary is that BPE, with
    pre-tokenizer `pre`, instead of the bytes."""
    path = Path(path)
    byte_tokens = shape.vocab
    shape, tensors = padded(shape, tensors, pad)
    writer = gguf.GGUFWriter(None, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GPT2])
    writer.add_name(model_name)
    writer.add_file_type(file_type(gguf, outtype))
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.d_model)
    writer.add_feed_forward_length(shape.d_ff)
    writer.add_block_count(shape.layers)
    writer.add_head_count(shape.heads)
    writer.add_layer_norm_eps(LAYER_NORM_EPS)

    symbols = byte_symbols() if token_text == "bytes" else hex_symbols()
    writer.add_tokenizer_model("gpt2")
    if bpe is None:
        writer.add_tokenizer_pre(PRE_TOKENIZER)
        texts = [symbols[b] for b in range(byte_tokens)]
        merges = [f"{symbols[UNUSED_MERGE[0]]} {symbols[UNUSED_MERGE[1]]}"]
    else:  # the BPE's tokens and merges, in GPT-2's byte stand-ins
        pieces, bpe_merges = bpe
        writer.add_tokenizer_pre(pre)
        texts = ["".join(symbols[b] for b in piece) for piece in pieces]
        merges = [f"{texts[a]} {texts[b]}" for a, b in bpe_merges]
    writer.add_token_list(texts + [pad_token(i) for i in range(pad)])
    writer.add_token_types([gguf.TokenType.NORMAL] * byte_tokens
                           + [gguf.TokenType.UNUSED] * pad)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(EOS_TOKEN)
    writer.add_eos_token_id(EOS_TOKEN)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)

    layout = tensor_layout(shape)
    for name, dims in layout:
        dtype, qtype = stored_type(gguf, name, dims, outtype)
        if qtype is None:
            writer.add_tensor_info(name, dims, dtype, math.prod(dims) * dtype.itemsize)
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(dims, qtype)
            writer.add_tensor_info(name, byte_shape, dtype, math.prod(byte_shape), raw_dtype=qtype)

    partial = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer.write_header_to_file(partial)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for (name, tensor), (expected_name, dims) in zip(tensors, layout, strict=True):
            assert name == expected_name and tensor.shape == dims, (name, expected_name)
            dtype, qtype = stored_type(gguf, name, dims, outtype)
            if qtype is None:
                writer.write_tensor_data(tensor.astype(dtype, copy=False))
            else:  # from float32 (the f16 values exactly), as llama-quantize reads them
                writer.write_tensor_data(gguf.quants.quantize(tensor.astype(np.float32), qtype))
        writer.close()
        partial.replace(path)
    except BaseException as e:
        writer.close()
        partial.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise ConversionError(f"{path}: cannot write the GGUF file "
                                  f"({e.strerror or e})") from None
        raise


# ---- command line ------------------------------------------------------------------------------

def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def main(argv=None):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--gguf-py", metavar="DIR",
                        help="llama.cpp's gguf-py directory (default: $SPECDEC_GGUF_PY, then the "
                             "Python path)")
    common.add_argument("--pad", type=int, default=0, metavar="N",
                        help="append N unused tokens <|pad_0|>... with zero embedding (and "
                             "output) rows, as model families pad their vocabularies "
                             "(default 0)")
    common.add_argument("--token-text", choices=("bytes", "hex"), default="bytes",
                        help="how token text is written: GPT-2's byte stand-ins (default), or "
                             "\"<0xBB>\" (a vocabulary disjoint from every byte-level one, for "
                             "tests; llama.cpp cannot tokenize text with it)")
    common.add_argument("--tokenizer", metavar="FILE",
                        help="the model's vocabulary is this byte-level BPE (tools/train/bpe.py's "
                             ".tokenizer, e.g. models/kjv-bpe.tokenizer), written as a GPT-2 BPE "
                             "vocabulary; vocab_size must be its size")
    common.add_argument("--pre", choices=("gpt-2", "trillion"), default="gpt-2",
                        help="with --tokenizer: tokenizer.ggml.pre (default gpt-2; trillion: the "
                             "same split, no clean-up of spaces in llama_detokenize)")
    common.add_argument("--outtype", choices=OUTTYPES, default="f16",
                        help="storage of matrices and embeddings (default f16; 1-D tensors are "
                             "f32; q8_0 / q4_0 quantize the matrices and the token embedding, "
                             "the position embedding stays f16)")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = ap.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", parents=[common], help="convert a .spdc model")
    convert.add_argument("spdc", help="input .spdc file (models/README.md)")
    convert.add_argument("gguf", help="output .gguf file")
    rand = commands.add_parser("random", parents=[common], help="write a GPT with random weights")
    rand.add_argument("gguf", help="output .gguf file")
    rand.add_argument("--vocab", type=positive, default=BYTE_VOCAB_MAX,
                      help=f"tokens: bytes 0..vocab-1 (default {BYTE_VOCAB_MAX})")
    for flag in ("--layers", "--d-model", "--heads", "--d-ff", "--context"):
        rand.add_argument(flag, type=positive, required=True)
    rand.add_argument("--seed", type=int, required=True, help="NumPy generator seed")
    rand.add_argument("--name", help="general.name (default: the output file's stem)")
    a = ap.parse_args(argv)

    try:
        if not 0 <= a.pad <= MAX_VOCAB:
            raise ConversionError(f"--pad {a.pad}: expected 0..{MAX_VOCAB} padding tokens")
        bpe = None
        max_vocab = BYTE_VOCAB_MAX
        if a.tokenizer:
            if a.token_text != "bytes":
                raise ConversionError("--tokenizer writes GPT-2's byte stand-ins: it cannot be "
                                      "combined with --token-text hex")
            bpe = read_bpe(a.tokenizer)
            max_vocab = len(bpe[0])
        gguf = import_gguf(a.gguf_py)
        if a.command == "convert":
            shape, tensors = read_spdc(a.spdc, max_vocab)
        else:
            shape = Shape(a.vocab, a.context, a.layers, a.heads, a.d_model, a.d_ff)
            check_shape(shape, "random", max_vocab)
        if bpe is not None and shape.vocab != max_vocab:
            raise ConversionError(f"{a.tokenizer}: {max_vocab} tokens, but the model's "
                                  f"vocab_size is {shape.vocab}")
        check_quantizable(gguf, shape, a.outtype)
        if a.command == "convert":
            write_gguf(gguf, a.gguf, shape, Path(a.spdc).stem, tensors.items(), a.outtype, a.pad,
                       a.token_text, bpe, a.pre)
        else:
            write_gguf(gguf, a.gguf, shape, a.name or Path(a.gguf).stem,
                       random_tensors(shape, a.seed), a.outtype, a.pad, a.token_text, bpe, a.pre)
    except ConversionError as e:
        print(f"spdc_to_gguf: {e}", file=sys.stderr)
        return 1
    padding = f", {a.pad} padding tokens" if a.pad else ""
    print(f"spdc_to_gguf: wrote {a.gguf} ({shape.describe()}{padding}, {a.outtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
