#!/usr/bin/env python3
"""fuzz/make_corpus.py: writes the committed seed corpus, fuzz/corpus/<target>/.

Run from the repository root after `make cpu` (the tokenizer seeds are trained
with build/forge). Seeds are small valid inputs plus a few near-misses, so the
fuzzer starts inside each format rather than having to discover it:
  config       configs/*.json and a few variants (llama with GQA, all keys, defaults only)
  safetensors  files as forge writes them (padded header, F32/I32, metadata), a scalar,
               an empty tensor, every dtype, an unpadded header
  shard        version 1 (uint16) and 2 (uint32) shards, an empty one
  tokenizer    encoder.json NUL vocab.bpe NUL text, for tokenizers trained by
               `forge tokenizer train` (257 ids: byte-level; 280 and 320 ids)
  tokenizer_text  texts: English, Unicode, invalid UTF-8, <|endoftext|>, whitespace runs
Regression inputs (crashes the fuzzers found) live next to the seeds as
crash-*; this script never removes them.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def config_seeds():
    cdir = os.path.join(ROOT, "configs")
    for name in sorted(os.listdir(cdir)):
        if name.endswith(".json"):
            with open(os.path.join(cdir, name), "rb") as f:
                put("config", "seed-" + name, f.read())
    put("config", "seed-minimal.json",
        '{"family": "gpt2", "vocab_size": 2, "context_length": 1, "d_model": 1, "n_layers": 1, "n_heads": 1}')
    put("config", "seed-every-key.json", json.dumps({
        "name": "all", "family": "llama", "vocab_size": 512, "context_length": 64, "d_model": 64,
        "n_layers": 2, "n_heads": 8, "n_kv_heads": 2, "ffn_hidden": 172, "norm": "layernorm",
        "norm_eps": 1e-6, "positions": "learned", "rope_theta": 500000.0, "activation": "gelu",
        "bias": True, "tied_embeddings": True, "init_std": 0.01}, indent=1))
    put("config", "seed-bad-key.json", '{"family": "gpt2", "vocab_sise": 50257}')


def safetensors(tensors, meta=None, pad=True, order=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header = {}
    if meta is not None:
        header["__metadata__"] = meta
    off = 0
    blobs = []
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def safetensors_seeds():
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    put("safetensors", "seed-model.safetensors", safetensors([
        ("wte.weight", "F32", [4, 2], f32(*range(8))),
        ("h.0.ln_1.bias", "F32", [2], f32(0.5, -0.5)),
        ("step", "I32", [], struct.pack("<i", 7)),
    ], meta={"format": "pt", "forge_config": '{"family": "gpt2"}'}))
    put("safetensors", "seed-empty-tensor.safetensors", safetensors([
        ("empty", "F32", [0, 3], b""),
        ("x", "BF16", [2], b"\x80\x3f\x00\x40"),
    ]))
    put("safetensors", "seed-no-tensors.safetensors", safetensors([], meta={"k": "v"}))
    dtypes = [("F64", 8), ("F32", 4), ("F16", 2), ("BF16", 2), ("I64", 8), ("I32", 4), ("I16", 2), ("I8", 1),
              ("U64", 8), ("U32", 4), ("U16", 2), ("U8", 1), ("BOOL", 1), ("F8_E4M3", 1), ("F8_E5M2", 1)]
    put("safetensors", "seed-dtypes.safetensors", safetensors(
        [("t%d" % i, dt, [1, 1, 1, 2], bytes(range(2 * size))) for i, (dt, size) in enumerate(dtypes)]))
    put("safetensors", "seed-unpadded.safetensors", safetensors([("a", "U8", [3], b"abc")], pad=False))


def shard(tokens, version):
    fmt = "<%dH" if version == 1 else "<%dI"
    header = struct.pack("<3i", 20240520, version, len(tokens)) + b"\0" * (1024 - 12)
    return header + struct.pack(fmt % len(tokens), *tokens)


def shard_seeds():
    put("shard", "seed-v1.bin", shard([50256, 15496, 995, 0, 1, 65535, 42, 50256], 1))
    put("shard", "seed-v2.bin", shard([100000, 7, 0, 2**31 - 1, 65536], 2))
    put("shard", "seed-empty.bin", shard([], 1))


TEXTS = [
    b"Hello world! It's 2024, isn't it?\n\nThe quick brown fox.",
    "caf\u00e9 \u4f60\u597d \U0001F44B \u2028 \u00a0x".encode(),
    b"a<|endoftext|>b<|endoftext|>\r\n\t  \x00\xff\xfe\xc3( \x80",
    b"   leading and trailing   \n",
]

CORPUS = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
    "of foolishness. There were a king with a large jaw and a queen with a plain face, on the throne "
    "of England; 1775, 1776. Don't we'll they've I'm you'd. caf\u00e9 na\u00efve \u00fcber "
    "\u4f60\u597d\u4e16\u754c <|endoftext|> The end.\n"
) * 4


def tokenizer_seeds(forge):
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write(CORPUS)
        for vocab in (257, 280, 320):
            out = os.path.join(tmp, "tok%d" % vocab)
            subprocess.run([forge, "tokenizer", "train", "--vocab", str(vocab), "--out", out, text],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(os.path.join(out, "encoder.json"), "rb") as f:
                enc = f.read()
            with open(os.path.join(out, "vocab.bpe"), "rb") as f:
                bpe = f.read()
            for i, t in enumerate(TEXTS if vocab == 320 else TEXTS[:1]):
                put("tokenizer", "seed-v%d-t%d" % (vocab, i), enc + b"\0" + bpe + b"\0" + t)


def tokenizer_text_seeds():
    for i, t in enumerate(TEXTS):
        put("tokenizer_text", "seed-t%d" % i, t)
    put("tokenizer_text", "seed-english", CORPUS.encode())
    put("tokenizer_text", "seed-spaces", b"a" + b" " * 40 + b"b\n\n\n  \t\t\r\n" + b"aaaaaaaaaaaaaaaaaaa ab aba")
    put("tokenizer_text", "seed-long-piece", b"x" + b"ab" * 40 + b" " + "\u00e9".encode() * 30)


def main():
    forge = os.path.join(ROOT, "build", "forge")
    if not os.access(forge, os.X_OK):
        sys.exit("fuzz/make_corpus.py: build/forge is missing; run `make cpu` first")
    for target in ("config", "safetensors", "shard", "tokenizer", "tokenizer_text"):
        d = os.path.join(OUT, target)
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name.startswith("seed-"):
                    os.remove(os.path.join(d, name))
    config_seeds()
    safetensors_seeds()
    shard_seeds()
    tokenizer_seeds(forge)
    tokenizer_text_seeds()


if __name__ == "__main__":
    main()
