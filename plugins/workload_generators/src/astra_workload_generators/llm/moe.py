"""A mixture-of-experts FFN: the router, shared experts, the expert all-to-alls and the routed experts'
grouped GEMMs, forward and backward (routing arithmetic: :mod:`.routing`)."""

from __future__ import annotations

from astra_sim.chakra import types as T

from .routing import ep_loads, local_expert_rows


class MoeOps:
    """Mixture-of-experts layers (a stage-builder mixin)."""

    def _a2a(self, label, layer, deps=()):
        """An expert all-to-all (EP > 1; returns whether there is one). Balanced routing: ``a2a_bytes`` per rank.
        With ``--moe-expert-load`` it is an all-to-all-v: rank e sends ``loads[j]`` token copies to EP rank j
        (:func:`ep_loads`) and gets ``loads[e]`` from each in the dispatch, the reverse in the combine. Its time
        is set by the busiest receiver (dispatch) or sender (combine), whose EP - 1 messages all carry
        ``max(loads)`` copies, so it is timed as the all-to-all whose per-peer message has that size:
        ``comm_size = EP * max(loads) * h * bytes`` on every rank (balanced loads: ``a2a_bytes``)."""
        cfg = self.cfg
        if cfg.ep == 1:
            return False
        size = self.a2a_bytes
        if cfg.moe_expert_load:
            size = cfg.ep * max(self.ep_loads(layer)) * self.dims.hidden * self.nbytes
        self.coll(f"ep_a2a.{label}", T.ALL_TO_ALL, size, "ep", deps)
        return True

    def ep_loads(self, layer):
        """Token copies this rank sends to each EP rank's experts in ``layer`` (see :func:`ep_loads`; computed
        once per layer, as every micro-batch and phase routes the same)."""
        if layer not in self._ep_loads:
            self._ep_loads[layer] = ep_loads(self.dims, self.cfg, self.tokens, self.dims.moe_index(layer))
        return self._ep_loads[layer]

    def expert_rows(self, layer):
        """Token copies this rank's experts compute in ``layer``: :func:`routed_rows` (balanced routing, or the
        --moe-imbalance straggler), or with --moe-expert-load EP x its share from every rank."""
        if not self.cfg.moe_expert_load:
            return self.routed
        return self.cfg.ep * self.ep_loads(layer)[self.e]

    def expert_groups(self, layer):
        """Token copies each of this rank's E/EP experts computes in ``layer`` (:func:`local_expert_rows`),
        adding up to :meth:`expert_rows`; None with one local expert (its GEMMs are plain GEMMs)."""
        if layer not in self._expert_groups:
            dims, cfg = self.dims, self.cfg
            groups = None
            if dims.experts // cfg.ep > 1:
                groups = local_expert_rows(dims, cfg, self.tokens, dims.moe_index(layer), self.e,
                                           self.expert_rows(layer))
            self._expert_groups[layer] = groups
        return self._expert_groups[layer]

    def expert_mm(self, label, m, k, n, layer, dim, deps=()):
        """A routed experts' GEMM ``[m,k] x [k,n]`` (``m`` or, for a weight gradient, ``k`` = the token copies
        of all local experts; the weight operand shows one expert's): a grouped GEMM whose groups are the
        local experts, marked with the Chakra attributes ``grouped_gemm_dim`` (``"m"`` or ``"k"``, the
        dimension split over the experts) and ``grouped_gemm_sizes`` (that dimension per expert) for the gpu
        compute model's grouped-GEMM time."""
        groups = self.expert_groups(layer)
        return self.mm(label, m, k, n, deps, grouped=None if groups is None else (dim, groups))

    def moe_forward(self, lab, layer):
        """The router (gate GEMM + softmax over the experts) on this rank's tokens (split over TP with sequence
        parallelism, replicated without); shared experts on every token; all-to-all dispatch; the routed experts
        as grouped GEMMs (:meth:`expert_mm`, one group per local expert) over the token copies this rank
        receives (balanced routing: tokens*top_k, or :func:`routed_rows` with a capacity factor;
        :meth:`expert_rows`); all-to-all combine."""
        dims, tp, n, h = self.dims, self.cfg.tp, self.tokens, self.dims.hidden
        mf = dims.expert_ffn // tp
        gm = 2 if dims.gated else 1
        self.mm(lab + ".router", self.ln_rows, h, dims.experts, linear=False)
        if self.cfg.ew:
            self.ew("aten::_softmax", lab + ".router.softmax", [self._t(self.ln_rows, dims.experts)])
        if dims.shared_experts:
            sf = dims.shared_experts * mf
            self.fp8_cast(lab + ".shared.fc1", n, h)  # (FP8: the expert MLPs are plain TE linears, no fused casts)
            self.mm(lab + ".shared.fc1", n, h, gm * sf)
            self.act_fwd(lab + ".shared.fc1", n, sf)
            self.fp8_cast(lab + ".shared.fc2", n, sf)
            self.mm(lab + ".shared.fc2", n, sf, h)
        self._a2a(lab + ".dispatch", layer)
        nk = self.expert_rows(layer)
        self.fp8_cast(lab + ".experts.fc1", nk, h)
        self.expert_mm(lab + ".experts.fc1", nk, h, gm * mf, layer, "m")
        self.act_fwd(lab + ".experts.fc1", nk, mf)
        self.fp8_cast(lab + ".experts.fc2", nk, mf)
        self.expert_mm(lab + ".experts.fc2", nk, mf, h, layer, "m")
        self._a2a(lab + ".combine", layer)

    def moe_backward(self, lab, layer, deps=()):
        dims, tp, n, h = self.dims, self.cfg.tp, self.tokens, self.dims.hidden
        mf = dims.expert_ffn // tp
        f1 = (2 if dims.gated else 1) * mf
        nk = self.expert_rows(layer)
        if self._a2a(lab + ".combine", layer, deps):
            deps = ()
        if self.fp8_cast(lab + ".experts.fc2.dgrad", nk, h, deps) is not None:  # FP8: the output gradients
            deps = ()
        self.expert_mm(lab + ".experts.fc2.dgrad", nk, h, mf, layer, "m", deps)
        self.expert_mm(lab + ".experts.fc2.wgrad", mf, nk, h, layer, "k")
        self.act_bwd(lab + ".experts.fc1", nk, mf)
        self.fp8_cast(lab + ".experts.fc1.dgrad", nk, f1)
        self.expert_mm(lab + ".experts.fc1.dgrad", nk, f1, h, layer, "m")
        self.expert_mm(lab + ".experts.fc1.wgrad", h, nk, f1, layer, "k")
        self._a2a(lab + ".dispatch", layer)
        if dims.shared_experts:
            sf, sf1 = dims.shared_experts * mf, dims.shared_experts * f1
            self.fp8_cast(lab + ".shared.fc2.dgrad", n, h)
            self.mm(lab + ".shared.fc2.dgrad", n, h, sf)
            self.mm(lab + ".shared.fc2.wgrad", sf, n, h)
            self.act_bwd(lab + ".shared.fc1", n, sf)
            self.fp8_cast(lab + ".shared.fc1.dgrad", n, sf1)
            self.mm(lab + ".shared.fc1.dgrad", n, sf1, h)
            self.mm(lab + ".shared.fc1.wgrad", h, n, sf1)
        rows, E = self.ln_rows, dims.experts
        if self.cfg.ew:
            self.ew("aten::_softmax_backward_data", lab + ".router.softmax",
                    [self._t(rows, E), self._t(rows, E)])
        self.mm(lab + ".router.dgrad", rows, E, h, linear=False)
        self.mm(lab + ".router.wgrad", h, rows, E, linear=False)
