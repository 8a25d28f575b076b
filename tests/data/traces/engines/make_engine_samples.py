#!/usr/bin/env python3
"""Writes the serving-engine samples in this folder, by hand, in the layouts the engines write
(no data copied from any engine run). The architecture is tests/data/traces/tiny-dsv2.yaml: 5 decoder
layers, MoE layers 1..4, 64 experts, top-6. Provenance of each layout (public sources):

- sglang_routed.jsonl, sglang_routed_physical.jsonl: one SGLang /generate response per line, whose
  meta_info["routed_experts"] is base64 of a little-endian int32 array [prompt + completion - 1 tokens]
  [num_hidden_layers][num_experts_per_tok] (sgl-project/sglang
  python/sglang/srt/layers/moe/routed_experts_capturer.py, RoutedExpertsCapturer.get_routed_experts;
  python/sglang/srt/managers/tokenizer_manager.py, where meta_info["routed_experts"] is set). A dense
  layer is never captured: its rows keep the capturer's fill value (-1; 0 in older versions).
  Line 2 is a batched /generate answer (a JSON array of responses).
- sglang_expert_map.json: the physical -> logical map of a server with 8 redundant experts
  (python/sglang/srt/eplb/expert_location.py, ExpertLocationMetadata.physical_to_logical_map,
  num_layers x num_physical_experts), as JSON.
- sglang_per_token.json: the per_token mode dump of /dump_expert_distribution_record
  (python/sglang/srt/eplb/expert_distribution.py, _DetailAccumulator.dump: records of
  _DetailSinglePassGatherer.collect, plus last_physical_to_logical_map), which SGLang writes with
  torch.save, converted to JSON with tensors as lists (FORMAT.md gives the one-line conversion).
  topk_ids_of_layer is [num_layers][tokens][8] (_TOP_K_NUM), -1 past top_k and at dense layers.
- sglang_stat.json: the stat mode dump (_StatAccumulator.dump: rank, logical_count
  [buffered passes][num_layers][num_logical_experts], average_utilization_rate_over_window), converted
  the same way; pass 2 is an unused slot of the circular buffer (all zero).
- megatron_router_trace_rank0.jsonl: Megatron-Core's router trace (NVIDIA/Megatron-LM
  megatron/core/transformer/moe/router_trace.py, RouterTracer._make_index_record and
  _flush_records_to_disk): one JSON line per (step, block, layer) with top_indices num_tokens x topk;
  "layer" is N of the router's module name decoder.layers.N. Step 0 holds two micro-batches (the
  layers repeat), then step 1, and one multi-token-prediction record (block "mtp").
- vllm_eplb_state.json: vLLM's EPLB state (vllm-project/vllm vllm/distributed/eplb/eplb_state.py,
  EplbModelState.expert_load_window [window][num_moe_layers][num_physical_experts],
  expert_load_window_step, physical_to_logical_map [num_moe_layers][num_physical_experts]), which vLLM
  keeps in memory only, saved as JSON the way FORMAT.md "vllm-eplb" shows; slot 1 is the oldest pass
  and slot 2 was never filled.
- trtllm_expert_statistic/: TensorRT-LLM's expert statistic (NVIDIA/TensorRT-LLM
  tensorrt_llm/_torch/expert_statistic.py, ExpertStatistic._maybe_add_info and _write): meta_info.json
  and rank0.safetensors whose I64 tensors "{iteration}_{layer}" hold torch.bincount counts per expert
  (the safetensors layout: 8-byte little-endian header length, a JSON header padded with spaces to a
  multiple of 8, then the raw data). Iterations 100..102 of EXPERT_STATISTIC_ITER_RANGE=100-103.
"""
import base64
import json
import random
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAYERS, MOE, EXPERTS, TOPK, REDUNDANT = 5, [1, 2, 3, 4], 64, 6, 8
rng = random.Random(20260)


def token_routes():
    """One token: per decoder layer, TOPK distinct logical experts (None for a dense layer)."""
    return [rng.sample(range(EXPERTS), TOPK) if l in MOE else None for l in range(LAYERS)]


def b64_routes(tokens, dense_fill, to_physical=None):
    values = []
    for tok in tokens:
        for l, ids in enumerate(tok):
            if ids is None:
                values += [dense_fill] * TOPK
            else:
                values += [to_physical(l, e) if to_physical else e for e in ids]
    return base64.b64encode(struct.pack("<%di" % len(values), *values)).decode("ascii")


def response(rid, prompt, completion, dense_fill, to_physical=None):
    tokens = [token_routes() for _ in range(prompt + completion - 1)]
    meta = {"id": rid, "finish_reason": {"type": "length", "length": completion}, "prompt_tokens": prompt,
            "completion_tokens": completion, "cached_tokens": 0, "e2e_latency": 0.25,
            "routed_experts": b64_routes(tokens, dense_fill, to_physical)}
    return {"text": " a sample", "output_ids": list(range(100, 100 + completion)), "meta_info": meta}


# Physical layout: slot s < 64 holds expert s; slots 64..71 replicate experts (7 * j + layer) % 64.
p2l = [[s if s < EXPERTS else (7 * (s - EXPERTS) + l) % EXPERTS for s in range(EXPERTS + REDUNDANT)]
       for l in range(LAYERS)]


def to_physical(l, e):
    replicas = [s for s in range(EXPERTS, EXPERTS + REDUNDANT) if p2l[l][s] == e]
    return replicas[0] if replicas and rng.random() < 0.7 else e


with open(HERE / "sglang_routed.jsonl", "w") as f:
    f.write(json.dumps(response("a1", 4, 3, -1)) + "\n")
    f.write(json.dumps([response("b1", 2, 2, 0), response("b2", 5, 1, 0)]) + "\n")
with open(HERE / "sglang_routed_physical.jsonl", "w") as f:
    f.write(json.dumps(response("p1", 6, 4, -1, to_physical)) + "\n")
with open(HERE / "sglang_expert_map.json", "w") as f:
    json.dump({"physical_to_logical_map": p2l}, f)


def pass_record(pass_id, positions, extend_seq_lens, forward_mode):
    n = len(positions)
    topk = [[[-1] * 8 for _ in range(n)] for _ in range(LAYERS)]
    count = [[0] * (EXPERTS + REDUNDANT) for _ in range(LAYERS)]
    for t in range(n):
        for l, ids in enumerate(token_routes()):
            if ids is None:
                continue
            phys = [to_physical(l, e) for e in ids]
            topk[l][t] = phys + [-1] * (8 - TOPK)
            for p in phys:
                count[l][p] += 1
    return {"forward_pass_id": pass_id, "rank": 0, "gatherer_key": "primary",
            "input_ids": [rng.randrange(1000) for _ in range(n)], "positions": positions,
            "extend_seq_lens": extend_seq_lens, "forward_mode": forward_mode, "topk_ids_of_layer": topk,
            "misc_objects": [], "global_physical_count": count}


records = [pass_record(0, [0, 1, 2, 0, 1], [3, 2], 1), pass_record(1, [3, 2], None, 2)]
with open(HERE / "sglang_per_token.json", "w") as f:
    json.dump({"records": records, "last_physical_to_logical_map": p2l}, f)


def stat_pass(tokens):
    counts = [[0] * EXPERTS for _ in range(LAYERS)]
    for _ in range(tokens):
        for l, ids in enumerate(token_routes()):
            for e in ids or []:
                counts[l][e] += 1
    return counts


with open(HERE / "sglang_stat.json", "w") as f:
    json.dump({"rank": 0, "logical_count": [stat_pass(7), stat_pass(3), stat_pass(0), stat_pass(12)],
               "average_utilization_rate_over_window": None}, f)


def megatron_record(step, layer, tokens, block="decoder", mtp_idx=None):
    rec = {"step": step, "stage": "pre_dispatch", "block": block, "layer": layer, "rank": 0,
           "num_tokens": len(tokens), "topk": TOPK}
    if mtp_idx is not None:
        rec["mtp_idx"] = mtp_idx
    rec["top_indices"] = [tok[layer] for tok in tokens]
    return rec


with open(HERE / "megatron_router_trace_rank0.jsonl", "w") as f:
    for step, count in [(0, 5), (0, 3), (1, 4)]:
        tokens = [token_routes() for _ in range(count)]
        for layer in MOE:
            f.write(json.dumps(megatron_record(step, layer, tokens)) + "\n")
        if step == 1:
            f.write(json.dumps(megatron_record(step, 1, tokens, "mtp", 0)) + "\n")


def physical_pass(tokens):
    load = [[0] * (EXPERTS + REDUNDANT) for _ in MOE]
    for _ in range(tokens):
        for i, l in enumerate(MOE):
            for e in token_routes()[l]:
                load[i][to_physical(l, e)] += 1
    return load


with open(HERE / "vllm_eplb_state.json", "w") as f:
    json.dump({"expert_load_window": [physical_pass(5), physical_pass(4), physical_pass(0), physical_pass(2)],
               "expert_load_window_step": 1, "physical_to_logical_map": [p2l[l] for l in MOE]}, f)


def safetensors_bytes(tensors):
    header, data = {}, b""
    for name in sorted(tensors):
        raw = struct.pack("<%dq" % len(tensors[name]), *tensors[name])
        header[name] = {"dtype": "I64", "shape": [len(tensors[name])], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


trt = HERE / "trtllm_expert_statistic"
trt.mkdir(exist_ok=True)
with open(trt / "meta_info.json", "w") as f:
    json.dump({"num_experts": EXPERTS, "num_experts_per_token": TOPK}, f)
tensors = {}
for iteration, tokens in [(100, 3), (101, 6), (102, 1)]:
    counts = stat_pass(tokens)
    for l in MOE:
        tensors["%d_%d" % (iteration, l)] = counts[l]
with open(trt / "rank0.safetensors", "wb") as f:
    f.write(safetensors_bytes(tensors))
