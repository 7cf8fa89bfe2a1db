"""Small LLM layouts that the generator's tests share (the encoder's and the in-memory workload's): one place for
the arguments of ``astra workload llm`` (without ``-o``) that cover TP, PP, CP, EP, MoE, ZeRO 3, FSDP2, DeepSpeed,
block-scaled FP8 with CUDA graphs and the serving modes; each test adds the layouts only it needs."""

SMALL = ["--layers", "4", "--hidden", "256", "--heads", "8", "--vocab", "1000", "--seq-len", "128"]
MOE = SMALL + ["--experts", "8", "--top-k", "2", "--moe-ffn", "512"]

#: name -> astra workload llm arguments
SHARED_LAYOUTS = {
    "dense_tp_pp_dp": SMALL + ["--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "4"],
    "fsdp2_selective": SMALL + ["--gated", "--dp", "4", "--zero", "3", "--framework", "fsdp2", "--micro-batches",
                                "2", "--recompute", "selective"],
    "deepspeed_zero3": SMALL + ["--dp", "4", "--zero", "3", "--framework", "deepspeed", "--micro-batches", "2"],
    "cp_pp": SMALL + ["--tp", "2", "--cp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "2"],
    "moe_ep_alltoall": MOE + ["--tp", "2", "--dp", "4", "--ep", "2", "--micro-batches", "2", "--sequence-parallel",
                              "--moe-dispatcher", "alltoall"],
    "mxfp8_cuda_graphs": SMALL + ["--tp", "2", "--dp", "2", "--micro-batches", "2", "--gemm-dtype", "mxfp8",
                                  "--cuda-graphs"],
    "prefill_cp": SMALL + ["--mode", "prefill", "--tp", "2", "--cp", "2", "--pp", "2", "--batch-size", "4",
                           "--micro-batches", "2", "--prompt-len", "64"],
    "decode_moe": MOE + ["--mode", "decode", "--tp", "2", "--pp", "2", "--dp", "2", "--ep", "2", "--batch-size",
                         "4", "--micro-batches", "2", "--decode-steps", "3", "--decode-len", "5", "--logits",
                         "last"],
    "mixed_chunk": SMALL + ["--mode", "mixed", "--tp", "2", "--pp", "2", "--batch-size", "4", "--prefill-chunk",
                            "32", "--prefill-done", "16"],
}
