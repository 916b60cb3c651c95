"""Write tiny Llama-architecture GGUF files for tests (random weights, byte-level BPE vocab).

Loading them exercises the same path as the real GGUF packages (gguf parsing,
dequantisation, tokenizer conversion, the conversion cache) in about a second.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _byte_alphabet() -> list[str]:
    # GPT-2's bytes_to_unicode: every byte gets a printable character.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_llama_gguf(path: Path, *, seed: int = 0, n_layers: int = 2, d_model: int = 64,
                          n_heads: int = 4, n_kv_heads: int = 2, quantize: bool = True) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    d_head = d_model // n_heads
    tokens = ["<s>", "</s>"] + _byte_alphabet()
    merges = ["Ġ t", "Ġ a", "h e", "i n"]
    tokens += [m.replace(" ", "") for m in merges]
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-fixture")
    writer.add_context_length(256)
    writer.add_embedding_length(d_model)
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(2 * d_model)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(d_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (vocab - 2))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)

    def add(name: str, data: np.ndarray) -> None:
        if quantize and data.ndim == 2 and data.shape[1] % 32 == 0:
            qtype = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, data)

    add("token_embd.weight", mat(vocab, d_model))
    for i in range(n_layers):
        add(f"blk.{i}.attn_norm.weight", np.ones(d_model, np.float32))
        add(f"blk.{i}.attn_q.weight", mat(n_heads * d_head, d_model))
        add(f"blk.{i}.attn_k.weight", mat(n_kv_heads * d_head, d_model))
        add(f"blk.{i}.attn_v.weight", mat(n_kv_heads * d_head, d_model))
        add(f"blk.{i}.attn_output.weight", mat(d_model, n_heads * d_head))
        add(f"blk.{i}.ffn_norm.weight", np.ones(d_model, np.float32))
        add(f"blk.{i}.ffn_gate.weight", mat(2 * d_model, d_model))
        add(f"blk.{i}.ffn_up.weight", mat(2 * d_model, d_model))
        add(f"blk.{i}.ffn_down.weight", mat(d_model, 2 * d_model))
    add("output_norm.weight", np.ones(d_model, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
