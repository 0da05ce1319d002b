#!/usr/bin/env python3
"""Tiny random Qwen3.5 checkpoints with HF transformers reference outputs (the logits oracle).

Run on a machine with torch 2.11 and transformers 5.17 (no network needed; nothing is
downloaded):

    python3 scripts/make_hf_fixture.py --out tests/fixtures

For each fixture it builds Qwen3_5ForCausalLM(config) in float32, randomises every parameter
(zero-centred norm weights near 0 so the +1 convention is exercised, the gated norm near 1,
A_log, dt_bias, conv, projections scaled to keep activations O(1)), saves it with
save_pretrained in bfloat16, reloads it from disk as float32 (so the reference uses exactly the
bf16 values on disk) and writes, into OUT/<name>/:

    config.json          full config (every field, not only the non-default ones)
    model.safetensors    bf16 weights, HF names
    reference.json       prompt ids, 40 greedy ids, checks, versions, notes
    logits_prefill.f32   one forward over the prompt, float32 LE row-major [T][vocab]
    logits_decode.f32    the prompt fed one token at a time through the cache, same layout

References are computed in float32 on the CPU (transformers' GDN code casts to float32
internally, so float64 would not be honoured), eager attention, the torch GDN and causal-conv
paths (flash-linear-attention and causal-conv1d are blocked so they cannot be picked up).
The script checks that HF's own prefill and decode agree, that the greedy continuation agrees
with a single prefill over prompt + continuation, and that the reloaded weights equal the
bf16-rounded ones; it exits non-zero on any failure.
"""

import argparse
import json
import math
import os
import platform
import shutil
import struct
import sys
import tempfile
from pathlib import Path

# Never reach for the network, and make sure the pure-torch reference kernels run: importing
# these names fails, so transformers falls back to its torch implementations.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
BLOCKED_KERNEL_PACKAGES = ("fla", "causal_conv1d")
for _name in BLOCKED_KERNEL_PACKAGES:
    sys.modules[_name] = None

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

PROMPT_IDS = [1, 17, 250, 3, 499, 42, 77, 128, 300, 5, 411, 64, 256, 9, 333, 100]
N_GREEDY = 40
# Step-by-step vs one-pass logits may differ by float32 rounding only (chunked vs recurrent GDN).
MAX_PATH_DIFF = 2e-3
# Seeds are tried until every greedy argmax wins by at least this much, so an engine that is
# right to float32 rounding cannot flip a greedy token on a near tie.
MIN_GREEDY_MARGIN = 1e-2
MAX_SEED_TRIES = 64

FIXTURES = {
    # Hv/Hk = 3: exercises the grouped -> tiled V-head reorder; untied output head.
    "hf_tiny_gqa3": dict(linear_num_value_heads=6, tie_word_embeddings=False),
    # Hv == Hk (reorder is the identity); output tied to the embedding.
    "hf_tiny_eq": dict(linear_num_value_heads=2, tie_word_embeddings=True),
}

# What gdn's converter reads from config.json (src/convert/hf_convert.cpp).
REQUIRED_CONFIG_FIELDS = [
    "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
    "linear_num_value_heads", "vocab_size", "max_position_embeddings", "layer_types",
]


class FixtureError(Exception):
    pass


def check(cond, message):
    if not cond:
        raise FixtureError(message)


def make_config(linear_num_value_heads, tie_word_embeddings):
    head_dim = 64
    rotary_half = int(head_dim * 0.25) // 2  # partial_rotary_factor 0.25 (the Qwen3.5 default)
    # Qwen3.5's [11, 11, 10] over a 32-wide rotary half, scaled to this one.
    mrope_section = [3, 3, 2]
    assert sum(mrope_section) == rotary_half
    config = Qwen3_5TextConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention"] * 2,  # full_attention_interval 2
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=head_dim,
        linear_num_key_heads=2,
        linear_num_value_heads=linear_num_value_heads,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_conv_kernel_dim=4,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        tie_word_embeddings=tie_word_embeddings,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10_000_000,
            "mrope_section": mrope_section,
            "mrope_interleaved": True,
        },
    )
    config._attn_implementation = "eager"
    return config


def init_std(name, param, config):
    """(kind, scale) for one parameter; raises for a name the fixture does not know."""
    e = config.hidden_size
    if name.endswith("linear_attn.norm.weight"):
        return "one_plus_normal", 0.2  # gated norm: plain multiply, weights around 1
    if name.endswith("norm.weight"):
        return "normal", 0.2  # zero-centred RMSNorm: x * (1 + w)
    if name.endswith("A_log") or name.endswith("dt_bias"):
        return "uniform", 1.0  # U(-1, 1)
    if name.endswith("conv1d.weight"):
        return "normal", 1.0 / math.sqrt(config.linear_conv_kernel_dim)
    if name.endswith("embed_tokens.weight"):
        # A tied embedding doubles as the output head: keep logits O(2) then.
        return "normal", (2.0 / math.sqrt(e) if config.tie_word_embeddings else 1.0)
    if name == "lm_head.weight":
        return "normal", 2.0 / math.sqrt(e)
    if name.endswith(".weight") and param.dim() == 2:
        return "normal", 1.0 / math.sqrt(param.shape[1])  # nn.Linear [out, in]
    raise FixtureError(f"no initialisation rule for parameter {name} {tuple(param.shape)}")


@torch.no_grad()
def randomise(model, config, seed):
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        kind, scale = init_std(name, p, config)
        if kind == "uniform":
            v = (torch.rand(p.shape, generator=gen) * 2 - 1) * scale
        else:
            v = torch.randn(p.shape, generator=gen) * scale
            if kind == "one_plus_normal":
                v = v + 1
        p.copy_(v)


@torch.no_grad()
def forward_logits(model, ids, start, past=None, use_cache=False):
    """Logits [len(ids), vocab] for ids at positions start.., and the cache."""
    input_ids = torch.tensor([ids], dtype=torch.long)
    positions = torch.arange(start, start + len(ids), dtype=torch.long)[None]
    out = model(input_ids=input_ids, position_ids=positions, past_key_values=past,
                use_cache=use_cache)
    return out.logits[0].float(), out.past_key_values


@torch.no_grad()
def stepwise(model, ids, n_new):
    """Feeds ids one at a time through the cache, then n_new greedy tokens.

    Returns the per-step logits of every fed token, and the greedy ids."""
    rows, past = [], None
    for t, tok in enumerate(ids):
        logits, past = forward_logits(model, [tok], t, past, use_cache=True)
        rows.append(logits[-1])
    greedy = []
    for i in range(n_new):
        greedy.append(int(torch.argmax(rows[-1])))
        if i + 1 < n_new:
            logits, past = forward_logits(model, [greedy[-1]], len(ids) + i, past, use_cache=True)
            rows.append(logits[-1])
    return torch.stack(rows), greedy


def top2_margin(logits):
    top = torch.topk(logits, 2, dim=-1).values
    return (top[..., 0] - top[..., 1]).min().item()


def generate_ids(model, n_new):
    """HF's own generate() as an independent cache path; None if this version refuses."""
    try:
        out = model.generate(torch.tensor([PROMPT_IDS]), max_new_tokens=n_new,
                             min_new_tokens=n_new, do_sample=False, pad_token_id=0)
    except Exception as e:  # the manual loop and the prefill check still stand
        print(f"  note: generate() cross-check skipped: {type(e).__name__}: {e}")
        return None
    return out[0, len(PROMPT_IDS):].tolist()


def saved_tensor_names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k: v for k, v in header.items() if k != "__metadata__"}


def expected_tensor_names(config):
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not config.tie_word_embeddings:
        names.add("lm_head.weight")
    for i, kind in enumerate(config.layer_types):
        p = f"model.layers.{i}."
        names |= {p + s for s in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                  "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                  "mlp.down_proj.weight")}
        if kind == "linear_attention":
            names |= {p + "linear_attn." + s for s in (
                "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
                "conv1d.weight", "dt_bias", "A_log", "norm.weight", "out_proj.weight")}
        else:
            names |= {p + "self_attn." + s for s in (
                "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                "q_norm.weight", "k_norm.weight")}
    return names


def save_and_reload(model, config, directory):
    """Saves model in bf16, reloads it as float32; checks names, dtypes and exact values."""
    rounded = {n: p.detach().to(torch.bfloat16).float() for n, p in model.named_parameters()}
    model.to(torch.bfloat16).save_pretrained(directory)
    model.to(torch.float32)
    st = Path(directory) / "model.safetensors"
    check(st.is_file(), f"save_pretrained wrote no {st} (files: {os.listdir(directory)})")
    header = saved_tensor_names(st)
    if config.tie_word_embeddings and "lm_head.weight" in header:
        # The fixture exists to test a tied head: store it the way tied checkpoints ship.
        from safetensors.torch import load_file, save_file
        tensors = load_file(str(st))
        del tensors["lm_head.weight"]
        save_file(tensors, str(st), metadata={"format": "pt"})
        print("  note: save_pretrained stored the tied lm_head.weight; removed it")
        header = saved_tensor_names(st)
    want = expected_tensor_names(config)
    check(set(header) == want, "saved tensor names differ from the Qwen3.5 layout: missing "
          f"{sorted(want - set(header))}, unexpected {sorted(set(header) - want)}")
    bad = sorted(n for n, v in header.items() if v["dtype"] != "BF16")
    check(not bad, f"tensors not saved as BF16: {bad}")

    loaded = Qwen3_5ForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                attn_implementation="eager",
                                                output_loading_info=True)
    reloaded, info = loaded if isinstance(loaded, tuple) else (loaded, {})
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        found = info.get(key) if isinstance(info, dict) else getattr(info, key, None)
        # A tied head may be listed as missing; the value check below covers it either way.
        found = [k for k in (found or []) if not (config.tie_word_embeddings and
                                                  k == "lm_head.weight")]
        check(not found, f"from_pretrained reported {key}: {found}")
    reloaded.eval()
    params = dict(reloaded.named_parameters())
    check(set(params) == set(rounded),
          f"reloaded parameters differ: {sorted(set(params) ^ set(rounded))}")
    for n, v in rounded.items():
        check(params[n].dtype == torch.float32 and torch.equal(params[n].detach(), v),
              f"reloaded {n} is not the bf16-rounded value")
    if config.tie_word_embeddings:
        check(torch.equal(reloaded.lm_head.weight, reloaded.model.embed_tokens.weight),
              "tied lm_head differs from embed_tokens after reload")
    return reloaded


def reference_outputs(model):
    """All reference data for one model, with the consistency checks HF itself must pass."""
    prefill, _ = forward_logits(model, PROMPT_IDS, 0)
    steps, greedy = stepwise(model, PROMPT_IDS, N_GREEDY)
    decode = steps[:len(PROMPT_IDS)]
    prefill_vs_decode = (prefill - decode).abs().max().item()
    # One pass over prompt + continuation must reproduce every step-by-step row.
    full, _ = forward_logits(model, PROMPT_IDS + greedy[:-1], 0)
    full_vs_steps = (full - steps).abs().max().item()
    full_greedy = torch.argmax(full[len(PROMPT_IDS) - 1:], dim=-1).tolist()
    return dict(prefill=prefill, decode=decode, greedy=greedy,
                prefill_vs_decode=prefill_vs_decode, full_vs_steps=full_vs_steps,
                full_greedy=full_greedy,
                greedy_margin=top2_margin(steps[len(PROMPT_IDS) - 1:]),
                prompt_margin=top2_margin(prefill))


def write_f32(path, logits):
    values = logits.contiguous().view(-1).tolist()
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values))


def build_fixture(name, spec, out_root, first_seed):
    out = Path(out_root) / name
    config = make_config(**spec)
    rotary = 2 * Qwen3_5ForCausalLM(config).model.rotary_emb.inv_freq.numel()
    check(rotary == 16, f"expected 16 rotary dims (64 x 0.25), transformers uses {rotary}")
    best = None
    for seed in range(first_seed, first_seed + MAX_SEED_TRIES):
        torch.manual_seed(seed)
        model = Qwen3_5ForCausalLM(config).eval()
        randomise(model, config, seed)
        tmp = tempfile.mkdtemp(prefix=f"{name}_")
        reloaded = save_and_reload(model, config, tmp)
        ref = reference_outputs(reloaded)
        print(f"  seed {seed}: prefill vs decode {ref['prefill_vs_decode']:.2e}, "
              f"one pass vs steps {ref['full_vs_steps']:.2e}, "
              f"min greedy margin {ref['greedy_margin']:.3g}")
        check(ref["prefill_vs_decode"] <= MAX_PATH_DIFF,
              f"HF prefill and decode logits differ by {ref['prefill_vs_decode']}")
        check(ref["full_vs_steps"] <= MAX_PATH_DIFF,
              f"HF one-pass and step-by-step logits differ by {ref['full_vs_steps']}")
        check(ref["full_greedy"] == ref["greedy"],
              f"greedy ids differ between decode {ref['greedy']} and one pass "
              f"{ref['full_greedy']}")
        if best is None or ref["greedy_margin"] > best[1]["greedy_margin"]:
            if best is not None:
                shutil.rmtree(best[2])
            best = (seed, ref, tmp, reloaded)
        else:
            shutil.rmtree(tmp)
        if ref["greedy_margin"] >= MIN_GREEDY_MARGIN:
            break
    seed, ref, tmp, reloaded = best
    if ref["greedy_margin"] < MIN_GREEDY_MARGIN:
        print(f"  warning: best greedy margin {ref['greedy_margin']:.3g} < {MIN_GREEDY_MARGIN}")
    generated = generate_ids(reloaded, N_GREEDY)
    check(generated is None or generated == ref["greedy"],
          f"generate() gives {generated}, the decode loop {ref['greedy']}")

    out.mkdir(parents=True, exist_ok=True)
    for stale in out.iterdir():
        stale.unlink()
    shutil.move(str(Path(tmp) / "model.safetensors"), str(out / "model.safetensors"))
    shutil.rmtree(tmp)
    # save_pretrained keeps only non-default fields; the converter wants every field.
    reloaded.config.to_json_file(str(out / "config.json"), use_diff=False)
    written = json.loads((out / "config.json").read_text())
    # Describe the files, not this run: no temporary path, and the dtype actually on disk.
    written.pop("_name_or_path", None)
    written["dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    missing = [k for k in REQUIRED_CONFIG_FIELDS if k not in written]
    check(not missing, f"config.json lacks {missing}")
    write_f32(out / "logits_prefill.f32", ref["prefill"])
    write_f32(out / "logits_decode.f32", ref["decode"])
    reference = {
        "fixture": name,
        "prompt_ids": PROMPT_IDS,
        "greedy_ids": ref["greedy"],
        "greedy_note": f"{N_GREEDY} argmax tokens after the prompt, by repeated cached decode "
                       "steps; the first is the argmax of the prompt's last logits row",
        "logits_files": {"prefill": "logits_prefill.f32", "decode": "logits_decode.f32"},
        "logits_shape": [len(PROMPT_IDS), config.vocab_size],
        "logits_format": "float32 little-endian, row-major [T][vocab]",
        "weights": "model.safetensors holds bfloat16; the reference model is exactly those "
                   "values widened to float32",
        "compute": "float32 on CPU, eager attention, transformers' torch GDN/conv fallbacks "
                   f"(imports of {', '.join(BLOCKED_KERNEL_PACKAGES)} blocked)",
        "seed": seed,
        "checks": {
            "prefill_vs_decode_max_abs_diff": ref["prefill_vs_decode"],
            "one_pass_vs_stepwise_max_abs_diff": ref["full_vs_steps"],
            "min_greedy_top2_margin": ref["greedy_margin"],
            "min_prompt_top2_margin": ref["prompt_margin"],
            "generate_cross_check": generated is not None,
        },
        "config": {
            "hidden_size": config.hidden_size, "num_hidden_layers": config.num_hidden_layers,
            "layer_types": list(config.layer_types),
            "linear_num_key_heads": config.linear_num_key_heads,
            "linear_num_value_heads": config.linear_num_value_heads,
            "tie_word_embeddings": config.tie_word_embeddings,
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
    }
    (out / "reference.json").write_text(json.dumps(reference, indent=2) + "\n")
    total = 0
    for f in sorted(out.iterdir()):
        size = f.stat().st_size
        total += size
        print(f"  wrote {f} ({size} bytes)")
    print(f"  {name}: {total / 2**20:.2f} MiB, seed {seed}, greedy {ref['greedy'][:8]}...")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures", help="parent directory of the fixtures")
    ap.add_argument("--only", choices=sorted(FIXTURES), help="build one fixture")
    ap.add_argument("--seed", type=int, default=1234, help="first seed tried")
    args = ap.parse_args()
    torch.set_num_threads(1)  # fixed reduction order: the same numbers on any machine
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    try:
        for name, spec in FIXTURES.items():
            if args.only and name != args.only:
                continue
            print(f"{name}:")
            build_fixture(name, spec, args.out, args.seed)
    except FixtureError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
