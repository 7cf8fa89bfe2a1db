"""Custom collective algorithms for astra-sim-py.

* ``msccl``: MSCCL-IR XML (msccl-tools, TACCL, TE-CCL output), executed threadblock by threadblock
  (module :mod:`astra_collectives_msccl.msccl`, reader :mod:`astra_collectives_msccl.msccl_ir`).
* ``chakra_custom``: the reference's custom collectives, one Chakra ET per rank
  ``<prefix>.<rank>.et`` (module :mod:`astra_collectives_msccl.chakra_custom`).
* ``astra msccl to-chakra``: converts MSCCL-IR to the per-rank Chakra ETs the reference accepts
  (module :mod:`astra_collectives_msccl.convert`).
"""
