"""Congestion-aware network backends for astra-sim-py.

* ``congestion``: the reference's congestion-aware analytical model (directed links with FIFO
  queues, store-and-forward per hop) on Ring / FullyConnected / Switch dimensions, multi-dimensional
  with dimension-ordered routing (module :mod:`astra_network_congestion.congestion`).
* ``flow``: a flow-level model for arbitrary graphs and InfraGraph infrastructures (module
  :mod:`astra_network_congestion.flow`).
"""
