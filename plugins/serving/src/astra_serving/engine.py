"""One replica's engine: vLLM-style continuous batching (the V1 scheduler's model of it).

Every iteration the scheduler fills a token budget (``max_num_batched_tokens``) and a sequence limit
(``max_num_seqs``): first the running sequences (a decode needs one token; a prompt being prefilled its next
chunk), then, if nothing was preempted, swapped-out sequences and then waiting ones in policy order (FCFS by
arrival, or priority: lower ``priority`` first, then arrival). With chunked prefill a prompt takes whatever
budget is left; without it a prompt is admitted only whole. Each scheduled sequence must hold KV blocks for its
positions; when none are free the most recently admitted running sequence is preempted: by recompute (its
blocks freed, it restarts from the waiting queue's head and prefills its prompt and the tokens generated so far
again) or by swap (its blocks copied to host memory at ``swap_bytes_per_s`` and back before it resumes; the copy
time is added to the iteration that does it).

A sequence whose positions are all computed at the end of an iteration samples one token (vLLM's rule): the
last chunk of a prefill gives the first token, each decode one more. With ``first_token_from_decode``
(TurboMind's rule, ``FIRST_TOKEN_FROM``) a prefill computes the prompt but its last position, which the
sequence's first decode step computes, sampling the first token.

Lazy decoders (``Engine.lazy_decodes``, on by default; why: at 20 QPS an arrival or a finish comes about every
iteration, so the work must not grow with the batch). The longest run of decoding sequences at the head of the
running list (admission order) is kept as a group whose members are not touched per iteration: a member that
joined at group tick ``joined`` with ``computed`` and ``generated`` has ``tick - joined`` more of each, its last
token at a tick known when it joins (a heap) and its next KV block every ``block_size`` ticks from a known one
(a bucket per tick modulo the block size: how many members take a block in that tick's pass). A scheduler pass
takes the whole group in one go (one token each, its bucket's blocks in one take: a member's count of blocks is
brought up to date when it leaves the group), then schedules the rest as before; when the budget or the free
blocks would not cover the group it is dissolved (every member's state written back) and the pass is the plain
one, preemptions and all.
Every request's times are those of the plain loop (``lazy_decodes = False``; ``tests/test_fast_forward.py``
compares them on random workloads).

Asynchronous output processing (``EngineConfig.async_output``; vLLM V0 since v0.6.0, vllm-project/vllm#7049, with
multi-step #7921 and #8050): a step's sampled tokens are processed on the host during the engine's next step, and
reach the request's stream when that step's call returns. Source, the v0.6.0 release (PyPI vllm==0.6.0, wheel
sha256 6d68104d...): ``ModelRunner.execute_model`` (vllm/worker/model_runner.py) calls ``async_callback()`` after
launching the forward and the logits, before sampling; the callback (``LLMEngine._process_model_outputs``,
vllm/engine/llm_engine.py) processes the previous step's outputs and hands them to their streams at once
("Immediately process request outputs here (if callback is given)"; ``AsyncLLMEngine`` sets
``process_request_outputs_callback``: "This ensures quick processing of request outputs so the append to asyncio
queues is not delayed, especially for multi-step"). The streams are asyncio queues of the engine process's loop,
which runs their readers when the step's ``execute_model`` (run in a worker thread, ``make_async``) returns. A step
that ends a batch returns when its outputs are on the host (``MultiStepModelRunner._final_process_outputs``
pythonizes them, blocking), i.e. when it ends; a multi-step run's first step returns as soon as it is launched
(its outputs are pythonized later, without blocking: the host runs ahead). Here: every token an iteration delivers
(first tokens and finishes) is delivered when the engine's next batch's first step call returns
(``Batch.deliver_ns``): at the start of that step's GPU time (its scheduler pass done) for a multi-step run
(``num_scheduler_steps`` > 1, decode only) launched as a CUDA graph, at that step's end otherwise (a prefill or an
eager step is launched kernel by kernel, a single step returns when it ends). Not added: the callback's own host
time and the launch. When nothing else would run, the engine runs the extra decode step vLLM runs for the finished
sequences (vLLM's scheduler: "With async postprocessor, an extra decode run is done to process the final tokens")
and delivers by the same rule. So TTFT and E2E grow by one step (one-step engines) or by the next pass's host time
(a prompt followed by a multi-step run), and TPOT stays. The finished sequences' extra slot in a step that runs
anyway is not added (one decode row); their KV blocks are freed when they sample their last token. A multi-step
run's last step's tokens are delivered by the rule above with the next batch. A sequence that samples its last
token at step k of a run of n > k steps leaves when the run ends: v0.6.0's last step
(``MultiStepModelRunner._final_process_outputs``, vllm/worker/multi_step_model_runner.py) pythonizes each earlier
step's output as it ends and hands it to ``_process_model_outputs(is_last_step=False)``, which creates the
``RequestOutput`` of every sequence it finishes and passes them to the callback at once (vllm/engine/llm_engine.py:
"if finished_now and self.process_request_outputs_callback is not None"), in the worker thread, so they reach their
streams during that call, whose return is the run's end; such a sequence waits for no extra step. Not modelled (the
same for every delivery above): ``AsyncStream.put`` is ``asyncio.Queue.put_nowait`` from that thread, which
schedules the stream's reader without waking the RPC server's uvloop (vllm/entrypoints/openai/rpc/server.py); a
request entering the engine process wakes it, so a token handed over during a long call can leave before the call
returns. Off with pipeline parallelism and for a prefill replica (its KV transfer starts when the step ends).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from .kvcache import BlockManager


@dataclass
class EngineConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    chunked_prefill: bool = True
    policy: str = "fcfs"            # fcfs | priority
    preemption: str = "recompute"   # recompute | swap
    swap_bytes_per_s: float = 50e9  # per GPU, host <-> device
    role: str = "both"              # both | prefill (disaggregated prefill pool) | decode
    num_scheduler_steps: int = 1    # vLLM's multi-step scheduling: decode-only batches run this many steps
    host_ns_per_schedule: int = 0   # host time of one scheduler pass (fixed part), see HOST_US_PER_SEQ_VLLM060
    host_ns_per_seq: int = 0        # host time of one scheduler pass per scheduled sequence
    cuda_graph_sizes: tuple = ()    # decode-only batches run as CUDA graphs of these sizes (() = eager, no padding)
    separate_prefills: bool = False  # a batch admitting waiting prompts runs them alone (vLLM V0, no chunking)
    async_output: bool = False      # tokens delivered when the next step's call returns (vLLM V0's async output)
    first_token_from_decode: bool = False  # a prompt's last position waits for a decode step (TurboMind), see below
    sampler: object = None          # rows -> the sampler's GPU time (int ns) after each step (sampler.py); None: none


#: vLLM v0.6.0's host time per scheduler pass and scheduled sequence (scheduling, gathering the last step's
#: results, preparing the inputs), in us. Source: the vLLM team's v0.6.0 post (blog.vllm.ai 2024-09-05, "vLLM
#: v0.6.0: 2.7x Throughput Improvement"): multi-step scheduling (one scheduler pass per 10 steps) "improves the
#: throughput of running Llama 70B models on 4xH100 by 28%". With S the pass's host time and G the GPU step:
#: (G + S) / (G + S/10) = 1.28 gives S = 0.321 G; at that benchmark's full batch (256 sequences, ShareGPT) G is
#: 33.4 ms for Llama-3 70B TP 4 on hgx-h100 (this simulator, with the element-wise kernels of every step; 29.5 ms
#: without them), so S = 10.7 ms, 42 us per sequence (37 us without). The pass is
#: Python work over the scheduled sequences, hence per sequence. Output processing is not charged: v0.6.0
#: overlaps it with the next step (asynchronous output processing), and the API server is its own process.
HOST_US_PER_SEQ_VLLM060 = 42.0
#: TensorRT-LLM's Python runtime (``tensorrt_llm.runtime.GenerationSession``): host time per generation step, in us
#: (``--host-us-per-schedule trtllm-python``). Source: NVIDIA/TensorRT-LLM benchmarks/python/README.md (read at
#: 05316d33), the Python runtime benchmark's "Expected outputs": GPT-350M (24 layers, hidden 1024, 16 heads, vocab
#: 51200), FP16, plugin mode, batch 1, 60 prompt and 20 output tokens: "latency(ms) 41.362", "compute_cap sm80".
#: That latency times GenerationSession.setup() and decode() (benchmarks/python/gpt_benchmark.py ``run``): a context
#: step and 19 generation steps, no CUDA graph (``--enable_cuda_graph`` is off by default). This simulator's GPU time
#: of those 20 steps on dgx-a100, each run without host launches and with the graph gap (as serve's graph steps),
#: is 30.38 ms, so the host's share is 10.99 ms, 549 us a step (the README's batch-8 row gives 618, its batch-64 row
#: 248; tests/test_host_presets.py re-derives it). It followed the GPU model: 834 us before decode attention got its
#: measured floor (astra_gpu_model.attention.decode_params: 24.69 ms of GPU time then). It is the Python loop, TensorRT's enqueue and the per-call
#: setup, charged per step (each such row has 20). ASSUMPTIONS: sm80 is the A100 SXM 80 GB; the per-step host work
#: does not grow with the model (the same Python ops each step); the README's host CPU stands for the measured
#: system's. NeMo's inference path ran this runtime (NVIDIA/NeMo nemo/export/trt_llm/tensorrt_llm_run.py at
#: 97d1abb2, 2024-04-06: ``tensorrt_llm.runtime.GenerationSession(model_config, engine_buffer, runtime_mapping,
#: debug_mode=False)``, then ``setup()`` and ``decode()`` per call), so the registry's NeMo rows state it.
HOST_US_PER_STEP_TRTLLM_PYTHON = 549.0
#: named values of ``--host-us-per-schedule`` (published runtimes' per-step host time, us)
HOST_US_PER_SCHEDULE_PRESETS = {"trtllm-python": HOST_US_PER_STEP_TRTLLM_PYTHON}
#: Where a prompt's first token is sampled (``--first-token-from``). vLLM and TensorRT-LLM sample it from the
#: prefill's last position ("prefill", the default). LMDeploy's TurboMind (v0.1.0a1, the registry's LMDeploy rows)
#: prefills the prompt but its last token and computes that token in the next decode step, which samples the
#: first token ("decode"): src/turbomind/models/llama/LlamaBatch.cc, LlamaBatch::ContextDecode at tag v0.1.0a1:
#: "subtract input/context len by 1 to skip last input token (will process with decoder later)", and
#: ``cache_len = h_context_length - 1;  // -1 since we skip last token``; the loop then runs ``Generate`` for
#: ``step_length`` steps (1 by default, lmdeploy/turbomind/deploy/target_model/base.py) before it signals the
#: outputs. So its TTFT is the prefill of P - 1 tokens plus one decode step.
FIRST_TOKEN_FROM = ("prefill", "decode")
#: vLLM v0.6's CUDA-graph batch sizes (vllm/worker/model_runner.py _BATCH_SIZES_TO_CAPTURE: 1, 2, 4, then
#: multiples of 8 up to max_num_seqs, at most 256): a decode-only batch runs the graph of the next size up.
VLLM_CUDA_GRAPH_SIZES = (1, 2, 4) + tuple(range(8, 257, 8))


class Pipeline:
    """The stages of one pipeline-parallel replica, shared by its virtual engines. vLLM V0 runs PP as PP
    virtual engines, each a scheduler with its share of the KV cache (blocks // PP) and the full sequence
    limit, whose batches follow each other through the stages: stage s works on one batch at a time, so while
    one engine's batch is on stage 1 the next engine's is on stage 0. A batch's step enters stage s when it has
    left stage s - 1 and the stage is free; an engine's next step (or batch) needs its previous step's tokens,
    so its steps go through the pipeline one after the other."""

    def __init__(self, stages):
        self.free_ns = [0] * stages   # when each stage finishes the work given to it so far

    def run(self, start_ns, steps):
        """End (ns) of a batch that is ready at ``start_ns`` and runs ``steps`` (per step, its time on each
        stage); the stages stay taken until then."""
        t = start_ns
        for stages in steps:
            for s, dt in enumerate(stages):
                t = max(t, self.free_ns[s]) + dt
                self.free_ns[s] = t
        return t


def padded_batch(decode, sizes):
    """The CUDA-graph batch a decode-only batch of ``decode`` sequences runs (itself above the largest size:
    vLLM runs those eagerly)."""
    for size in sizes:
        if size >= decode:
            return size
    return decode


class Seq:
    """A request's state inside one engine."""

    __slots__ = ("req", "computed", "generated", "state", "admitted", "order", "prefix_done", "swapped_positions",
                 "joined", "phase", "energy_mark")

    def __init__(self, req, computed=0, generated=0):
        self.req = req
        self.computed = computed      # positions whose KV is in the cache
        self.generated = generated    # output tokens sampled so far
        self.state = "waiting"
        self.admitted = 0             # order of admission into running (preemption victim: the latest)
        self.order = 0
        self.prefix_done = False
        self.swapped_positions = 0
        self.joined = 0               # group tick at which it joined the lazy decoders (computed, generated then)
        self.phase = 0                # its block bucket among the lazy decoders
        self.energy_mark = 0.0        # the engine's energy per lazy decoder when it joined (energy.py)

    @property
    def tokens(self):
        """Positions the sequence has: its prompt and every sampled token."""
        return self.req.prompt_tokens + self.generated

    @property
    def pending(self):
        return self.tokens - self.computed


@dataclass(slots=True)
class Batch:
    items: list                 # [(seq, tokens scheduled)]
    prefill_tokens: int
    decode_seqs: int
    context: int                # mean KV length of the decode sequences
    prefill_done: int           # mean cached positions of the prefilled prompts
    extra_ns: int = 0           # swap copies
    steps: int = 1              # decode steps run back to back (multi-step scheduling)
    admitted: tuple = ()        # the items admitted from the waiting queue by this batch (the only ones that
                                # can be scheduled for the first time)
    group: int = 0              # lazy decoders scheduled before ``items`` (one token each; not in ``items``)
    shapes: tuple = ()          # the step simulator's shapes it runs (:meth:`Engine._steps`), set by end_ns
    host_ns: int = 0            # the host time of the scheduler pass that made it, set by end_ns
    first_end_ns: int = 0       # the end of its first step, set by end_ns
    deliver_ns: int = 0         # async output: when the last batch's tokens reach their streams (end_ns; module doc)
    extra_run: bool = False     # async output: the finished sequences' extra decode step (nothing else ran)
    prompts_sampled: int = 0    # prefilled prompts whose last position it computes (each samples a token)
    sampler_ns: int = 0         # the sampler's GPU time over its steps (sampler.py), set by end_ns


class Engine:
    """The scheduler and KV cache of one replica; the cluster calls :meth:`schedule` when the replica is idle and
    :meth:`complete` when the iteration's time has passed."""

    def __init__(self, index, timer, blocks: BlockManager, config: EngineConfig, kv_bytes_per_token=0,
                 pipeline=None, replica=None, virtual_engine=0):
        self.index = index
        #: a pipeline-parallel replica runs one engine per stage ("virtual engines", as vLLM V0 does) over shared
        #: stages (:class:`Pipeline`); None: the iteration runs alone on the replica
        self.pipeline = pipeline
        self.replica = index if replica is None else replica
        self.virtual_engine = virtual_engine
        self.timer = timer
        self.blocks = blocks
        self.config = config
        self.kv_bytes_per_token = kv_bytes_per_token
        self.waiting = []      # heap of (key, Seq)
        self.running = []      # in admission order
        self.swapped = []      # FIFO
        self.busy = False
        self._order = itertools.count()
        self._admit = itertools.count()
        self.iterations = 0
        self.busy_ns = 0
        self.preemptions = 0
        self.tokens_prefilled = 0
        self.tokens_decoded = 0
        # iterations that left work waiting because of each limit: what bounds the throughput
        self.limited = {"max_num_seqs": 0, "token_budget": 0, "kv_cache": 0}
        #: keep the decoding head of the running list as a lazy group (the module doc); False: the plain loop
        self.lazy_decodes = True
        self._lazy = 0         # the group: self.running[:self._lazy]
        self._tick = 0         # iterations the group has run
        self._ctx_base = 0     # sum over the group of (computed - joined)
        self._last = []        # heap of (tick of a member's last token, admitted, seq)
        self._grow = [0] * blocks.block_size  # tick % block size -> members that take a KV block in that tick's pass
        self._member_mj = 0.0  # energy charged to each lazy decoder so far (a member's share: this since it joined)
        self._padded = {}      # decode sequences -> the CUDA graph's batch they run (padded_batch)
        #: asynchronous output processing (the module doc): vLLM turns it off with pipeline parallelism
        self.async_output = config.async_output and pipeline is None and config.role != "prefill"
        #: a prompt's last position waits for a decode step (FIRST_TOKEN_FROM); a prefill replica samples itself
        self.decode_first = config.first_token_from_decode and config.role != "prefill"
        self._undelivered = None  # (first, finished) sequences of the last iteration, delivered as the next ends
        self._last_end = 0        # when the last iteration ended
        self._inside = []  # async output: the sequences the last multi-step run finished before its last step

    # ------------------------------------------------------------------ queue
    def _key(self, seq, front=False):
        order = -next(self._order) if front else next(self._order)
        if self.config.policy == "priority":
            return (seq.req.priority, 0 if front else 1, order)
        return (0 if front else 1, order)

    def add(self, seq, front=False):
        seq.state = "waiting"
        heapq.heappush(self.waiting, (self._key(seq, front), next(self._order), seq))

    def outstanding(self):
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def load_tokens(self):
        """Tokens still to process (prefill and decode) of everything queued or running: the least-loaded
        router's measure."""
        tick = self._tick
        total = sum(1 + seq.req.output_tokens - seq.generated - (tick - seq.joined)
                    for seq in self.running[:self._lazy])
        for seq in itertools.chain(self.running[self._lazy:], self.swapped, (s for _, _, s in self.waiting)):
            total += seq.pending + (seq.req.output_tokens - seq.generated)
        return total

    # ------------------------------------------------------------------ lazy decoders
    def _join(self):
        """Move the decoding sequences that follow the group in the running list into it (each holding the KV
        blocks of its computed positions and no more than one position's beyond)."""
        cfg = self.config
        if not self.lazy_decodes or cfg.num_scheduler_steps > 1 or cfg.role == "prefill":
            return
        running, blocks, tick, grow, last = self.running, self.blocks, self._tick, self._grow, self._last
        size, lazy, ctx = blocks.block_size, self._lazy, 0
        while lazy < len(running):
            seq = running[lazy]
            computed, generated, req = seq.computed, seq.generated, seq.req
            if generated == 0 or seq.pending != 1:
                break
            ahead = blocks.blocks_of(req.id) * size - computed  # ticks before it needs a new block
            if not 0 <= ahead < size or seq.state != "running":
                break
            seq.joined = tick
            seq.phase = phase = (tick + ahead) % size
            seq.energy_mark = self._member_mj
            grow[phase] += 1
            heapq.heappush(last, (tick + req.output_tokens - generated, seq.admitted, seq))
            ctx += computed - tick
            lazy += 1
        self._lazy = lazy
        self._ctx_base += ctx

    def _leave(self, seq):
        """Write a member's state back and take it out of the group (it samples its last token)."""
        moved = self._tick - seq.joined
        self._ctx_base -= seq.computed - seq.joined
        seq.computed += moved
        seq.generated += moved
        seq.req.energy_share_mj += self._member_mj - seq.energy_mark
        self.blocks.assign(seq.req.id, self._blocks_taken(seq))
        self._grow[seq.phase] -= 1
        self._lazy -= 1

    def _blocks_taken(self, seq):
        """The KV blocks a member took in the group's passes so far (ticks ``joined`` to ``tick - 1`` in its
        bucket)."""
        size = len(self._grow)
        first = seq.joined + (seq.phase - seq.joined) % size
        return 0 if first >= self._tick else (self._tick - 1 - first) // size + 1

    def _dissolve(self):
        """Write every member's state back and empty the group: the plain pass follows."""
        tick = self._tick
        for seq in self.running[:self._lazy]:
            moved = tick - seq.joined
            seq.computed += moved
            seq.generated += moved
            seq.req.energy_share_mj += self._member_mj - seq.energy_mark
            self.blocks.assign(seq.req.id, self._blocks_taken(seq))
        self._lazy = self._ctx_base = 0
        self._last.clear()
        self._grow = [0] * len(self._grow)

    def _schedule_group(self, budget):
        """Schedule the whole group (one token each, the blocks of this tick's bucket taken), as the plain pass
        would at the head of the running list; the members scheduled (0 after dissolving the group when the
        budget or the free blocks do not cover it)."""
        group = self._lazy
        if not group:
            return 0
        need = self._grow[self._tick % len(self._grow)]
        if group <= budget and (not need or self.blocks.take(need)):
            return group
        self._dissolve()
        return 0

    # ------------------------------------------------------------------ scheduling
    def _preempt(self, victim, batch_extra):
        self.preemptions += 1
        victim.req.preemptions += 1
        self.running.remove(victim)
        if self.config.preemption == "swap":
            positions = victim.computed
            self.blocks.release(victim.req.id)
            victim.state = "swapped"
            victim.swapped_positions = positions
            self.swapped.append(victim)
            batch_extra[0] += self._copy_ns(positions)
        else:
            self.blocks.release(victim.req.id)
            victim.computed = 0
            victim.prefix_done = False
            self.add(victim, front=True)

    def _copy_ns(self, positions):
        return int(positions * self.kv_bytes_per_token / self.config.swap_bytes_per_s * 1e9)

    def schedule(self):
        """The next iteration's batch, or None when there is nothing to do (with async output, the finished
        sequences' extra decode step when tokens wait for delivery and nothing else would run)."""
        batch = self._schedule()
        if batch is None and self._undelivered is not None:
            return self._extra_run()
        return batch

    def _extra_run(self):
        """The extra decode step vLLM runs for the sequences that sampled their last token in the last step (their
        output is processed during it); without one (only first tokens wait) they are delivered at once."""
        first, done = self._undelivered
        if not done:
            self._deliver(self._last_end)
            return None
        context = sum(seq.computed + 1 for seq in done) // len(done)
        return Batch([(seq, 1) for seq in done], 0, len(done), context, 0, extra_run=True)

    def _deliver(self, t):
        """Deliver the last iteration's tokens at ``t``: its first tokens and its finishes."""
        first, done = self._undelivered
        self._undelivered = None
        for seq in first:
            seq.req.first_token_ns = t
        for seq in done:
            seq.req.finish_ns = t

    def _schedule(self):
        cfg = self.config
        if cfg.separate_prefills and self.waiting and not self.swapped:
            # vLLM V0's default scheduler: waiting prompts first, and a batch that admits any runs them alone
            items = []
            _, blocked = self._admit_waiting(cfg.max_num_batched_tokens, items)
            if items:
                if blocked is None and self.waiting:
                    blocked = "max_num_seqs" if len(self.running) >= cfg.max_num_seqs else "token_budget"
                if blocked is not None:
                    self.limited[blocked] += 1
                return Batch(items, sum(n for _, n in items), 0, 0,
                             sum(seq.computed for seq, _ in items) // len(items), 0, 1, tuple(items),
                             prompts_sampled=sum(1 for seq, n in items if seq.computed + n >= seq.tokens))
        budget = cfg.max_num_batched_tokens
        group = self._schedule_group(budget) if self._lazy else 0
        if group and group == len(self.running) and not self.waiting and not self.swapped:
            # the group alone (half the iterations at 20 QPS): what the pass below gives when nothing else runs
            return Batch([], 0, group, (self._ctx_base + group * (self._tick + 1)) // group, 0, 0, 1, (), group)
        budget -= group
        items = []
        extra = [0]
        preempted = False
        running, block_size, chunked = self.running, self.blocks.block_size, cfg.chunked_prefill
        decode_first, to_compute = self.decode_first, self._to_compute
        i = group
        while i < len(running) and budget > 0:
            seq = running[i]
            computed = seq.computed
            pending = to_compute(seq)
            n = pending if pending < budget else budget
            if n <= 0 or (not chunked and n < pending):
                i += 1
                continue
            within = computed % block_size
            if within and within + n <= block_size:
                # the positions stay inside the sequence's last block, which it holds (a running sequence holds
                # the blocks of its computed positions): no block to take (the hot path of a decode step)
                items.append((seq, n))
                budget -= n
                i += 1
                continue
            ok = True
            while not self.blocks.grow(seq.req.id, computed + n):
                scheduled = {id(s) for s, _ in items}  # a victim is one not scheduled in this pass (nor the group)
                victim = next((s for s in reversed(self.running[group:]) if id(s) not in scheduled), None)
                if victim is None:
                    ok = False
                    break
                self._preempt(victim, extra)
                preempted = True
                if victim is seq:
                    ok = False
                    break
            if seq.state != "running":
                continue  # preempted itself: self.running[i] is already the next one
            if ok:
                items.append((seq, n))
                budget -= n
            i += 1
        blocked = None
        if not preempted:
            # swapped sequences come back first (whole: their KV is copied in)
            while self.swapped and budget > 0 and len(self.running) < cfg.max_num_seqs:
                seq = self.swapped[0]
                n = min(self._to_compute(seq), budget)
                # the blocks of the positions it has and of those it computes now (a sequence swapped out during
                # its prefill has more than one to compute)
                if not self.blocks.grow(seq.req.id, seq.swapped_positions + max(1, n)):
                    blocked = "kv_cache"
                    break
                self.swapped.pop(0)
                extra[0] += self._copy_ns(seq.swapped_positions)
                seq.state = "running"
                seq.admitted = next(self._admit)
                self.running.append(seq)
                if n > 0:
                    items.append((seq, n))
                    budget -= n
            admitted = ()
            if self.waiting:
                first = len(items)
                budget, blocked = self._admit_waiting(budget, items, blocked)
                admitted = tuple(items[first:])
        else:
            admitted = ()
        if not items and not group:
            if preempted and not self.running:
                # the only running sequences preempted themselves: their blocks are free now, admit again
                return self._schedule()
            return None
        if preempted:
            blocked = "kv_cache"
        elif blocked is None and (self.waiting or self.swapped):
            blocked = "max_num_seqs" if len(self.running) >= cfg.max_num_seqs else "token_budget"
        if blocked is not None:
            self.limited[blocked] += 1
        steps = self._multi_step(items) if cfg.num_scheduler_steps > 1 else 1
        prefill = done = prefills = sampled = 0
        decode, ctx = group, self._ctx_base + group * (self._tick + 1)  # the group's contexts: computed + 1 each
        for seq, n in items:
            # a decode: one position, the sequence's last (with decode_first, also a prompt's last one)
            if n == 1 and (seq.generated > 0 or decode_first) and seq.pending == 1:
                decode += 1
                ctx += seq.computed + 1
            else:
                prefill += n
                done += seq.computed
                prefills += 1
                if seq.computed + n >= seq.tokens:  # its last chunk: it samples
                    sampled += 1
        return Batch(items, prefill, decode, ctx // decode if decode else 0, done // prefills if prefills else 0,
                     extra[0], steps, admitted, group, prompts_sampled=sampled)

    def _admit_waiting(self, budget, items, blocked=None):
        """Admit waiting sequences in policy order while the budget, the sequence limit and the KV cache allow;
        (budget left, what blocked the head of the queue or ``blocked``)."""
        cfg, blocks, waiting, running = self.config, self.blocks, self.waiting, self.running
        chunked, most = cfg.chunked_prefill, cfg.max_num_seqs
        while waiting and budget > 0 and len(running) < most:
            seq = waiting[0][2]
            req = seq.req
            matched, cached = False, 0
            if seq.computed == 0 and not seq.prefix_done and blocks.prefix_caching:
                cached = blocks.match_prefix(req.id, req.prefix_group, req.prefix_tokens)
                # at least one position is computed in this iteration (a full cache hit recomputes the last)
                seq.computed = min(cached, seq.tokens - 1)
                seq.prefix_done = matched = True
            n = self._to_compute(seq)  # its pending positions
            if (not chunked and n > budget) or not blocks.grow(req.id, seq.computed + min(n, budget)):
                blocked = "token_budget" if not chunked and n > budget else "kv_cache"
                if matched:  # a waiting sequence holds no blocks: give the prefix back until it is admitted
                    blocks.release(req.id)
                    seq.computed, seq.prefix_done = 0, False
                break
            n = min(n, budget)
            if matched:
                blocks.count_match(req.prefix_group, req.prefix_tokens, cached)
            heapq.heappop(waiting)
            seq.state = "running"
            seq.admitted = next(self._admit)
            running.append(seq)
            items.append((seq, n))
            budget -= n
        return budget, blocked

    def _to_compute(self, seq):
        """Positions of ``seq`` an iteration may compute now: every one not computed yet, but a prompt's last when
        the first token comes from a decode step (``first_token_from_decode``: then it waits for one)."""
        pending = seq.pending
        if self.decode_first and pending > 1 and not seq.generated:
            return pending - 1
        return pending

    def _multi_step(self, items):
        """Steps of a decode-only batch under multi-step scheduling (1 otherwise, or when the cache cannot hold
        every sequence's next steps): vLLM v0.6 runs ``num_scheduler_steps`` decode steps without scheduling in
        between, so arrivals wait for the whole run and its tokens are delivered at its end. The run has all its
        steps even when every sequence ends sooner (v0.6.0: ``Scheduler._append_slots`` calls
        ``seq_group.init_multi_step(num_scheduler_steps=num_lookahead_slots + 1)`` for every decode, the engine steps
        until ``remaining_steps`` is 0, and ``MultiStepOutputProcessor`` drops the tokens past ``max_tokens``); the
        KV blocks taken are those of the tokens kept (vLLM also reserves the dropped ones' slots for the run)."""
        steps = self.config.num_scheduler_steps
        if steps <= 1 or self.config.role == "prefill":
            return 1
        if any(not (n == 1 and seq.generated > 0 and seq.pending == 1) for seq, n in items):
            return 1
        left = [min(steps, seq.req.output_tokens - seq.generated) for seq, _ in items]
        if any(self.blocks.needed(seq.req.id, seq.computed + k) > 0 for (seq, _), k in zip(items, left)):
            need = sum(self.blocks.needed(seq.req.id, seq.computed + k) for (seq, _), k in zip(items, left))
            if need > self.blocks.available():
                return 1
            for (seq, _), k in zip(items, left):
                self.blocks.grow(seq.req.id, seq.computed + k)
        return steps

    def _steps(self, batch):
        """The step simulator's shapes of ``batch``, one ``(prefill, decode, context, prefill_done, graph)`` per
        step it runs (the timer's arguments in order)."""
        sizes = self.config.cuda_graph_sizes
        if batch.prefill_tokens == 0 and sizes:
            # a decode-only batch runs the CUDA graph of the next captured size (one launch for the whole step):
            # the padding's slots cost their GEMM rows, not attention (the batch's total context is kept); a batch
            # above the largest size runs eagerly
            d = batch.decode_seqs
            padded = self._padded.get(d)
            if padded is None:
                padded = self._padded[d] = padded_batch(d, sizes)
            graph = padded <= sizes[-1]
            if batch.steps == 1:
                return [(0, padded, -(-batch.context * d // padded), 0, graph)]
            return [(0, padded, -(-(batch.context + k) * d // padded), 0, graph) for k in range(batch.steps)]
        if batch.steps > 1:  # the batch stays whole for every step (finished sequences are padding), context grows
            return [(0, batch.decode_seqs, batch.context + k, 0, False) for k in range(batch.steps)]
        return [(batch.prefill_tokens, batch.decode_seqs, batch.context, batch.prefill_done, False)]

    def end_ns(self, batch, now):
        """When ``batch``, scheduled at ``now``, ends: the pass's host time (once per multi-step run) and swap
        copies, then its steps back to back, alone on the replica or through the stages it shares with its virtual
        engines (:class:`Pipeline`)."""
        cfg = self.config
        host = batch.host_ns = cfg.host_ns_per_schedule + cfg.host_ns_per_seq * (len(batch.items) + batch.group)
        ready = now + host + batch.extra_ns
        shapes = batch.shapes = self._steps(batch)
        # the sampler's kernels after each step (sampler.py): the first step's rows are its decodes and the prompts
        # it ends, a multi-step run's later steps sample its decodes again (the batch stays whole)
        sampler = cfg.sampler
        first_sample = sampler(batch.decode_seqs + batch.prompts_sampled) if sampler is not None else 0
        next_sample = sampler(batch.decode_seqs) if sampler is not None and len(shapes) > 1 else 0
        batch.sampler_ns = first_sample + next_sample * (len(shapes) - 1)
        if self.pipeline is None:
            step_ns = self.timer.step_ns
            start = ready
            ready += step_ns(*shapes[0]) + first_sample
            batch.first_end_ns = ready
            # async output (the module doc): the last batch's tokens reach their streams when this batch's first
            # step call returns: at once for a multi-step run's first step launched as a CUDA graph, at its end
            # otherwise
            multi_graph = cfg.num_scheduler_steps > 1 and batch.prefill_tokens == 0 and shapes[0][4]
            batch.deliver_ns = start if multi_graph else ready
            for shape in shapes[1:]:
                ready += step_ns(*shape) + next_sample
            return ready
        stage_ns = self.timer.stage_ns
        steps = [stage_ns(*shape) for shape in shapes]
        if sampler is not None:  # on the last stage (its driver samples)
            for k, stages in enumerate(steps):
                stages[-1] += first_sample if k == 0 else next_sample
        batch.first_end_ns = batch.deliver_ns = end = self.pipeline.run(ready, steps)  # no async
        return end

    def charge(self, batch, energy_mj):
        """Split an iteration's energy (float mJ) over its sequences by the tokens each was scheduled (a lazy
        decoder one: its share is added to the running sum each member reads when it leaves the group)."""
        per_token = energy_mj / (batch.prefill_tokens + batch.decode_seqs)  # the items' tokens and the group's
        for seq, n in batch.items:
            seq.req.energy_share_mj += n * per_token
        if batch.group:
            self._member_mj += per_token

    def complete(self, batch, now):
        """Account the finished iteration at ``now``; (sequences that sampled their first token, sequences that
        finished), whose tokens the caller delivers at ``now``. With async output the engine delivers them itself,
        when its next batch's first step call returns (``Batch.deliver_ns``, :meth:`_deliver`), and returns two
        empty lists."""
        first, done = self._complete(batch)
        inside, self._inside = self._inside, []
        if not self.async_output:
            return first, done
        if self._undelivered is not None:
            self._deliver(batch.deliver_ns)
        self._last_end = now
        if inside:  # finished before the run's last step: they leave when the run's last call returns (module doc)
            for seq in inside:
                seq.req.finish_ns = now
            early = {id(seq) for seq in inside}
            done = [seq for seq in done if id(seq) not in early]
        if first or done:
            self._undelivered = (first, done)
        return [], []

    def _complete(self, batch):
        first, done = [], []
        self.iterations += 1
        self.tokens_prefilled += batch.prefill_tokens
        self.tokens_decoded += 0 if batch.extra_run else batch.decode_seqs  # an extra run's tokens are dropped
        multi = batch.steps > 1
        if batch.group:  # every member took one token: those at their last leave (in admission order)
            self._tick = tick = self._tick + 1
            last = self._last
            while last and last[0][0] == tick:
                seq = heapq.heappop(last)[2]
                self._leave(seq)
                self._finish(seq)
                done.append(seq)
        prefill_role = self.config.role == "prefill"
        for seq, n in batch.items:
            if seq.state != "running":
                continue
            req = seq.req
            if multi:  # multi-step decode: up to `steps` tokens, delivered now
                k = min(batch.steps, req.output_tokens - seq.generated)
                seq.computed += k - 1
                seq.generated += k - 1
                self.tokens_decoded += k - 1
            seq.computed += n
            if seq.computed >= seq.tokens:
                seq.generated += 1
                if seq.generated == 1:
                    first.append(seq)
                if seq.generated >= (1 if prefill_role else req.output_tokens):
                    self._finish(seq)
                    done.append(seq)
                    if multi and k < batch.steps:  # its last token before the run's last step
                        self._inside.append(seq)
        if self._lazy < len(self.running):
            self._join()
        return first, done

    def _finish(self, seq):
        """A sequence that sampled its last token leaves the engine (its blocks freed, its prefix kept cached;
        a prefill replica's blocks wait for the KV transfer)."""
        self.running.remove(seq)
        seq.state = "finished"
        keep = None
        if seq.req.prefix_group is not None:
            keep = (seq.req.prefix_group, seq.req.prefix_tokens // self.blocks.block_size)
        if self.config.role != "prefill":
            self.blocks.release(seq.req.id, keep)
