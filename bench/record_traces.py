#!/usr/bin/env python3
"""record_traces.py — records allocation traces of more real PyTorch programs for bench/traces/.

Each program runs on PyTorch's native caching allocator with its allocation history on
(torch.cuda.memory._record_memory_history), so the trace is the program's own sequence of
mallocs and frees, whatever allocator replays it later; the history goes through
integrations/pytorch/snapshot_to_trace.py into the trace format (docs/TRACE_FORMAT.md). Models
are built from transformers configs with random weights: nothing is downloaded.

  llama_train   a Llama-style decoder (8 layers, hidden 1024, GQA 16/4 heads, SwiGLU 2816, vocab
                32000), AdamW, bf16 autocast, 24 steps over batch 2-8 and sequence 128-1024
  t5_train      an encoder-decoder (T5, 6+6 layers, d_model 768), AdamW, bf16 autocast, 24 steps
                over batch 4-16, source 64-512, target 16-128
  llama_generate  the same decoder, fp16, greedy generation with its KV cache: 24 requests of
                batch 1-16, prompts of 32-768 tokens, 16-128 new tokens each (the cache grows by
                one token per step, as a server's does)

Per program it prints the events, the peak live bytes and what PyTorch itself reported
(max reserved / max allocated), and writes bench/traces/<name>.trace.gz (or --out DIR).

    python3 bench/record_traces.py [--out DIR] [--only NAME[,NAME...]]

Needs PyTorch with CUDA and transformers (the device machine has both).
"""
import argparse
import gzip
import io
import os
import pickle
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "integrations", "pytorch"))

import snapshot_to_trace  # noqa: E402


def llama(torch, dtype=None):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).cuda()
    return model.to(dtype) if dtype is not None else model


def train(torch, model, batches, make_batch):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for b in batches:
        inputs = make_batch(b)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()


def llama_train(torch, rng):
    model = llama(torch)
    shapes = [(rng.choice([2, 4, 8]), rng.choice([128, 256, 512, 768, 1024])) for _ in range(24)]

    def batch(shape):
        b, s = shape
        ids = torch.randint(0, 32000, (b, s), device="cuda")
        return {"input_ids": ids, "labels": ids}
    train(torch, model, shapes, batch)


def t5_train(torch, rng):
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(d_model=768, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=12,
                   vocab_size=32128, decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(cfg).cuda()
    shapes = [(rng.choice([4, 8, 16]), rng.choice([64, 128, 256, 512]), rng.choice([16, 64, 128]))
              for _ in range(24)]

    def batch(shape):
        b, s, t = shape
        return {"input_ids": torch.randint(0, 32128, (b, s), device="cuda"),
                "labels": torch.randint(0, 32128, (b, t), device="cuda")}
    train(torch, model, shapes, batch)


def llama_generate(torch, rng):
    model = llama(torch, torch.float16).eval()
    with torch.no_grad():
        for _ in range(24):
            b, s, n = rng.choice([1, 2, 4, 8, 16]), rng.choice([32, 128, 256, 512, 768]), \
                rng.choice([16, 32, 64, 128])
            ids = torch.randint(0, 32000, (b, s), device="cuda")
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0)
            torch.cuda.synchronize()


PROGRAMS = {"llama_train": llama_train, "t5_train": t5_train, "llama_generate": llama_generate}


def record(torch, name, out_dir):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    PROGRAMS[name](torch, random.Random(2026))
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    reserved, allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
    _, entries = snapshot_to_trace.device_trace(snap, None)
    text = io.StringIO()
    stats = snapshot_to_trace.convert(entries, text)
    path = os.path.join(out_dir, name + ".trace.gz")
    with gzip.open(path, "wt") as f:
        f.write("# %s: bench/record_traces.py, PyTorch %s, random weights\n"
                "# op addr size stream  (a=alloc f=free_requested c=free_completed)\n"
                % (name, torch.__version__))
        f.write(text.getvalue())
    print("%-16s %8d allocs, %d streams, peak live %.3f GB; PyTorch native: max reserved %.3f GB "
          "/ max allocated %.3f GB = %.3f; %d frees of blocks from before the history dropped"
          "  -> %s" % (name, stats["allocs"], stats["streams"], stats["peak_live"] / 1e9,
                       reserved / 1e9, allocated / 1e9, reserved / max(allocated, 1),
                       stats["dropped_frees"], path), flush=True)
    torch.cuda.empty_cache()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(HERE, "traces"))
    p.add_argument("--only", default=",".join(PROGRAMS))
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("record_traces.py: no CUDA device", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for name in args.only.split(","):
        if name not in PROGRAMS:
            print("record_traces.py: unknown program %r (known: %s)" % (name, ", ".join(PROGRAMS)),
                  file=sys.stderr)
            return 2
        try:
            record(torch, name, args.out)
        except Exception as e:  # one program's failure must not lose the others' traces
            failed += 1
            print("record_traces.py: %s failed: %s: %s" % (name, type(e).__name__, e),
                  file=sys.stderr, flush=True)
            torch.cuda.memory._record_memory_history(enabled=None)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
