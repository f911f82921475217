#!/usr/bin/env python3
"""hf_check.py: forge <-> Hugging Face transformers, both ways (issue 19 items 4 and 5).

  out: forge checkpoints (GPT-2 and Llama; trained here for a few steps, or given with --ckpt) load with
       GPT2LMHeadModel / LlamaForCausalLM.from_pretrained(DIR) through the config.json forge writes beside
       model.safetensors; transformers' mean loss on the windows `forge eval` uses must match the loss forge
       prints within --rtol (1e-4, fp32), the first window's logits must agree, and greedy generation must
       match `forge sample --temperature 0 --ids` token for token.
  in:  small GPT2LMHeadModel / LlamaForCausalLM models initialised by transformers from configs (fixed seed, no
       download; every tensor perturbed so no bias or norm weight sits at its 0/1 init), saved with
       save_pretrained (fp32, and one in bf16), are read by `forge eval` / `forge sample` (loss, logits, greedy
       tokens against transformers'), and `forge train --init DIR` trains from them for a few steps; the
       fine-tuned checkpoint loads back into transformers.

Data: a forge BPE tokenizer (512 ids) trained on --text (default: the repository's README.md and docs/*.md) and
its token shards, made with the forge binary itself. Nothing is downloaded.

Usage (needs torch + transformers + safetensors; the forge binary is an argument):
  python3 tools/hf_check.py --forge build/forge --device cpu
  python3 tools/hf_check.py --forge build/cuda/forge --device cuda      # forge runs --precision fp32
  python3 tools/hf_check.py --forge build/forge --ckpt runs/tiny ...   # also check existing checkpoints
Prints one line per check and a PASS/FAIL table last; exits 1 if any check failed.
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

# Nothing here may reach the network (the GPU machine has none): every model is local or built from a config.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

RESULTS = []  # (check, ok, detail)


def record(check, ok, detail):
    RESULTS.append((check, bool(ok), detail))
    print(f"{'ok  ' if ok else 'FAIL'} {check}: {detail}", flush=True)


def err_tail(p):
    """forge's error line(s) of a failed run, without its progress lines."""
    lines = [l for l in p.stderr.splitlines() if l.startswith("forge:")] or p.stderr.splitlines()[-3:]
    return " ".join(lines)[-400:]


def run(cmd, what, check=True):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def read_shard(path):
    """llm.c's .bin token shard (src/data/shards.h): 256 int32 header, then uint16 (v1) or uint32 (v2) tokens."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n = struct.unpack_from("<3i", data, 0)
    assert magic == 20240520, f"{path}: not a token shard"
    width = 2 if version == 1 else 4
    return list(struct.unpack_from(f"<{n}{'H' if width == 2 else 'I'}", data, 1024))


class Ctx:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        import torch
        self.torch = torch
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on both sides
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.tdev = "cuda" if args.device.startswith("cuda") and torch.cuda.is_available() else "cpu"
        import transformers
        self.versions = f"torch {torch.__version__} on {self.tdev}, transformers {transformers.__version__}"
        print(self.versions, flush=True)

    def forge(self, sub, *rest):
        cmd = [self.args.forge, sub, *rest]
        if sub in ("eval", "sample", "train"):
            cmd += ["--device", self.args.device]
            if self.args.device.startswith("cuda"):
                cmd += ["--precision", "fp32"]  # the exact fp32 step: the comparison is at fp32 tolerance
        return cmd

    # ---- data ----------------------------------------------------------------------------------------------
    def prepare_data(self):
        texts = self.args.text or [os.path.join(self.args.repo, "README.md")] + sorted(
            glob.glob(os.path.join(self.args.repo, "docs", "*.md")))
        corpus = os.path.join(self.work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as out:
            for t in texts:
                with open(t, encoding="utf-8", errors="replace") as f:
                    out.write(f.read())
                out.write("\n<|endoftext|>\n")
        self.tok_dir = os.path.join(self.work, "tok")
        self.data_dir = os.path.join(self.work, "data")
        run([self.args.forge, "tokenizer", "train", "--vocab", "512", "--out", self.tok_dir, corpus], "tokenizer")
        run([self.args.forge, "tokenize", "--tokenizer", self.tok_dir, "--out", self.data_dir,
             "--val-fraction", "0.2", corpus], "tokenize")
        vals = sorted(glob.glob(os.path.join(self.data_dir, "val_*.bin")))
        self.val_bin = vals[0]
        self.tokens = read_shard(self.val_bin)[: self.args.eval_tokens]
        self.eval_bin = os.path.join(self.work, "eval.bin")  # the same tokens for forge: a cut shard
        with open(self.eval_bin, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, len(self.tokens), *([0] * 253)))
            f.write(struct.pack(f"<{len(self.tokens)}H", *self.tokens))
        with open(os.path.join(self.tok_dir, "encoder.json"), encoding="utf-8") as f:
            self.tok_vocab = len(json.load(f))
        self.eot = self.tok_vocab - 1  # forge's <|endoftext|> is the last id

    # ---- transformers side ---------------------------------------------------------------------------------
    def hf_load(self, d):
        import transformers
        with open(os.path.join(d, "config.json")) as f:
            mt = json.load(f)["model_type"]
        cls = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM}[mt]
        # transformers 5 names the load dtype `dtype`; 4.x `torch_dtype` (fp32 either way: bf16 files are widened)
        major = int(transformers.__version__.split(".")[0])
        kw = {"dtype" if major >= 5 else "torch_dtype": self.torch.float32}
        m = cls.from_pretrained(d, attn_implementation="eager", **kw)
        return m.to(self.tdev).eval()

    def hf_eval(self, model, T):
        """Mean loss over the windows forge_evaluate uses (T inputs stepping by T, every token after the first
        predicted once), and the first window's logits."""
        torch = self.torch
        toks, n = self.tokens, len(self.tokens)
        total, count, first = 0.0, 0, None
        with torch.no_grad():
            for start in range(0, n - 1, T):
                end = min(start + T, n - 1)
                x = torch.tensor([toks[start:end]], device=self.tdev)
                y = torch.tensor(toks[start + 1: end + 1], device=self.tdev)
                logits = model(x).logits[0].float()
                if first is None:
                    first = logits.cpu()
                total += torch.nn.functional.cross_entropy(logits, y, reduction="sum").double().item()
                count += end - start
        return total / count, first

    def hf_greedy(self, model, prompt_ids, n_new, ctx):
        """forge_generate with temperature 0: argmax over the last ctx tokens, an id past the tokenizer's maps to
        <|endoftext|>, which ends the sample."""
        torch = self.torch
        seq = list(prompt_ids)
        with torch.no_grad():
            for _ in range(n_new):
                x = torch.tensor([seq[-ctx:]], device=self.tdev)
                nxt = int(torch.argmax(model(x).logits[0, -1].float()).item())
                if nxt >= self.tok_vocab:
                    nxt = self.eot
                if nxt == self.eot:
                    break
                seq.append(nxt)
        return seq

    # ---- one model, both sides -----------------------------------------------------------------------------
    def compare(self, label, d, tokenizer=None):
        """forge eval / sample on directory d against transformers' from_pretrained(d)."""
        torch = self.torch
        model = self.hf_load(d)
        ctx = model.config.max_position_embeddings
        T = min(self.args.seq_len, ctx)
        dump = os.path.join(self.work, "logits-" + label.replace("/", "-") + ".safetensors")
        tok_args = ["--tokenizer", tokenizer] if tokenizer else []
        p = run(self.forge("eval", "--ckpt", d, "--data", self.eval_bin, "--batch", "4", "--seq-len", str(T),
                           "--dump-logits", dump, *tok_args), f"forge eval {label}", check=False)
        if p.returncode != 0:
            record(f"{label} forge eval", False, err_tail(p))
            return
        m = re.search(r"\| loss ([0-9.]+) \|", p.stdout)
        forge_loss = float(m.group(1))
        hf_loss, hf_logits = self.hf_eval(model, T)
        rel = abs(forge_loss - hf_loss) / abs(hf_loss)
        record(f"{label} loss", rel <= self.args.rtol,
               f"forge {forge_loss:.6f} vs transformers {hf_loss:.6f} (rel {rel:.2e}, tol {self.args.rtol:g})")
        from safetensors.torch import load_file
        fl = load_file(dump)["logits"]
        diff = (fl - hf_logits[: fl.shape[0]]).abs().max().item()
        scale = hf_logits.abs().max().item()
        record(f"{label} logits", diff <= self.args.logits_atol,
               f"first window {tuple(fl.shape)}: max |diff| {diff:.2e} (max |logit| {scale:.2f}, tol "
               f"{self.args.logits_atol:g})")
        p = run(self.forge("sample", "--ckpt", d, "--temperature", "0", "--tokens", str(self.args.gen_tokens),
                           "--prompt", self.args.prompt, "--ids", *tok_args), f"forge sample {label}", check=False)
        if p.returncode != 0:
            record(f"{label} greedy", False, err_tail(p))
            return
        lines = p.stdout.split("\n")  # --ids: the prompt's ids, then the new ones
        prompt_ids = [int(t) for t in lines[0].split()]
        forge_ids = prompt_ids + [int(t) for t in lines[1].split()]
        hf_ids = self.hf_greedy(model, prompt_ids, self.args.gen_tokens, ctx)
        same = hf_ids == forge_ids
        where = next((i for i, (a, b) in enumerate(zip(hf_ids, forge_ids)) if a != b),
                     min(len(hf_ids), len(forge_ids)))
        if same:
            record(f"{label} greedy", True, f"{len(forge_ids) - len(prompt_ids)} new tokens identical")
            return
        detail = (f"differ at position {where}: forge {forge_ids[where:where + 5]} vs transformers "
                  f"{hf_ids[where:where + 5]}")
        # Two logits within fp32 rounding of each other are a tie either side may break: say so rather than
        # fail, but only when everything before the split was identical.
        tie = False
        if where < len(hf_ids) and where < len(forge_ids):
            with torch.no_grad():
                x = torch.tensor([forge_ids[:where][-ctx:]], device=self.tdev)
                lg = model(x).logits[0, -1].float()
            a, b = forge_ids[where], hf_ids[where]
            if a < lg.numel() and b < lg.numel():
                gap = abs(lg[a].item() - lg[b].item())
                tie = gap <= 1e-4 * max(1.0, abs(lg[b].item()))
                detail += f"; transformers' logits for the two differ by {gap:.2e}"
        if tie:
            detail = f"identical up to a near-tie at new token {where - len(prompt_ids)} ({detail})"
        record(f"{label} greedy", tie, detail)

    # ---- out: forge -> transformers ------------------------------------------------------------------------
    def check_out(self):
        ckpts = []
        for name, config in (("gpt2", "tiny"), ("llama", "tiny-llama")):
            out = os.path.join(self.work, f"run-{name}")
            p = run(self.forge("train", "--config", config, "--data", self.data_dir, "--out", out, "--steps",
                               str(self.args.train_steps), "--batch", "4", "--seq-len", "64", "--quiet",
                               "--eval-every", "0"), f"forge train {config}", check=False)
            if p.returncode != 0:
                record(f"out/{name} forge train", False, err_tail(p))
                continue
            with open(os.path.join(out, "latest")) as f:
                ckpts.append((f"out/{name}", os.path.join(out, f.read().strip())))
        for c in self.args.ckpt or []:
            with_latest = os.path.join(c, "latest")
            if os.path.exists(with_latest):
                with open(with_latest) as f:
                    c = os.path.join(c, f.read().strip())
            ckpts.append((f"out/{os.path.basename(os.path.normpath(c))}", c))
        for label, d in ckpts:
            if not os.path.exists(os.path.join(d, "config.json")):
                record(f"{label} config.json", False, f"{d} has no config.json (a config with no HF equivalent?)")
                continue
            try:
                self.compare(label, d)
            except Exception as e:  # a load failure is a failed check, not a crash of the whole run
                record(f"{label} from_pretrained", False, f"{type(e).__name__}: {e}"[-400:])

    # ---- in: transformers -> forge -------------------------------------------------------------------------
    def hf_models(self):
        import transformers
        V = self.tok_vocab + 3  # a padded vocabulary: rows past the tokenizer's, as real models have
        yield "in/gpt2", transformers.GPT2Config(
            vocab_size=V, n_positions=64, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new",
            layer_norm_epsilon=1e-5, bos_token_id=self.eot, eos_token_id=self.eot), None, True
        yield "in/gpt2-bf16", transformers.GPT2Config(
            vocab_size=V, n_positions=64, n_embd=64, n_layer=2, n_head=4, n_inner=160,
            tie_word_embeddings=False), "bf16", True
        yield "in/llama-gqa", transformers.LlamaConfig(
            vocab_size=V, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=False), None, False
        yield "in/llama-bias-tied", transformers.LlamaConfig(
            vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=500.0,
            attention_bias=True, mlp_bias=True, tie_word_embeddings=True), None, False

    def check_in(self):
        import transformers
        torch = self.torch
        for i, (label, cfg, dtype, gpt2_tok) in enumerate(self.hf_models()):
            torch.manual_seed(1234 + i)
            cls = transformers.GPT2LMHeadModel if cfg.model_type == "gpt2" else transformers.LlamaForCausalLM
            model = cls(cfg).float()
            with torch.no_grad():  # no tensor at its 0/1 init: a bias or norm weight mapped wrong must show
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            d = os.path.join(self.work, label.replace("/", "-"))
            if dtype == "bf16":
                model = model.to(torch.bfloat16)
            model.save_pretrained(d)
            tokenizer = None
            if gpt2_tok:  # HF's names for GPT-2's tokenizer files: forge must map them
                shutil.copy(os.path.join(self.tok_dir, "encoder.json"), os.path.join(d, "vocab.json"))
                shutil.copy(os.path.join(self.tok_dir, "vocab.bpe"), os.path.join(d, "merges.txt"))
            else:
                tokenizer = self.tok_dir
            try:
                self.compare(label, d, tokenizer)
            except Exception as e:
                record(f"{label} compare", False, f"{type(e).__name__}: {e}"[-400:])
                continue
            out = os.path.join(self.work, "ft-" + label.replace("/", "-"))
            p = run(self.forge("train", "--init", d, "--data", self.data_dir, "--out", out, "--steps",
                               str(self.args.train_steps), "--batch", "4", "--seq-len", "64", "--eval-every", "0",
                               "--lr", "1e-3"), f"forge train --init {label}", check=False)
            losses = [float(x) for x in re.findall(r"loss ([0-9.]+)", p.stdout)]
            ok = p.returncode == 0 and os.path.exists(os.path.join(out, "latest"))
            detail = (f"{self.args.train_steps} steps from the HF weights, rc {p.returncode}"
                      + (f", loss {losses[0]:.4f} -> {losses[-1]:.4f}" if losses else "")
                      + ("" if ok else ": " + err_tail(p)))
            if ok:
                with open(os.path.join(out, "latest")) as f:
                    ck = os.path.join(out, f.read().strip())
                try:
                    back = self.hf_load(ck)
                    detail += f"; fine-tuned checkpoint loads back ({type(back).__name__})"
                except Exception as e:
                    ok = False
                    detail += f"; fine-tuned checkpoint does not load back: {e}"[-300:]
            record(f"{label} train --init", ok, detail)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forge", required=True, help="the forge binary (build/forge, build/cuda/forge, ...)")
    ap.add_argument("--device", default="cpu", help="forge's --device (cpu, cuda, cuda:N); transformers runs on "
                    "cuda too when it is one and torch sees a GPU [cpu]")
    ap.add_argument("--ckpt", action="append", help="also check this forge run or checkpoint directory (HF out)")
    ap.add_argument("--text", action="append", help="corpus file(s) for the tokenizer and the tokens "
                    "[README.md + docs/*.md]")
    ap.add_argument("--repo", default=os.path.dirname(here), help=argparse.SUPPRESS)
    ap.add_argument("--work", help="keep the work directory here (default: a temporary one, removed)")
    ap.add_argument("--rtol", type=float, default=1e-4, help="loss tolerance, relative [1e-4]")
    ap.add_argument("--logits-atol", type=float, default=1e-3, help="first-window logits, max abs diff [1e-3]")
    ap.add_argument("--seq-len", type=int, default=64, help="eval window T (capped at the context) [64]")
    ap.add_argument("--eval-tokens", type=int, default=2000, help="tokens evaluated [2000]")
    ap.add_argument("--gen-tokens", type=int, default=24, help="greedy tokens compared [24]")
    ap.add_argument("--prompt", default="The model", help="greedy prompt ['The model']")
    ap.add_argument("--train-steps", type=int, default=20, help="steps of each forge training run [20]")
    ap.add_argument("--skip-out", action="store_true", help="only the HF in checks")
    ap.add_argument("--skip-in", action="store_true", help="only the HF out checks")
    args = ap.parse_args()
    args.forge = os.path.abspath(args.forge)
    work = args.work or tempfile.mkdtemp(prefix="forge-hf-check-")
    os.makedirs(work, exist_ok=True)
    versions = "torch/transformers not loaded"
    try:
        ctx = Ctx(args, work)
        versions = ctx.versions
        ctx.prepare_data()
        if not args.skip_out:
            ctx.check_out()
        if not args.skip_in:
            ctx.check_in()
    except Exception as e:
        record("setup", False, f"{type(e).__name__}: {e}"[-1500:])
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n== hf_check summary (forge --device {args.device}; {versions}) ==")
    w = max([len(c) for c, _, _ in RESULTS] + [5])
    for c, ok, detail in RESULTS:
        print(f"{'PASS' if ok else 'FAIL'}  {c:<{w}}  {detail}")
    failed = sum(1 for _, ok, _ in RESULTS if not ok)
    print(f"{len(RESULTS) - failed} passed, {failed} failed")
    return 1 if failed or not RESULTS else 0


if __name__ == "__main__":
    sys.exit(main())
