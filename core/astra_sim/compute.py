"""The kernel's compute-time models: trace replay and the reference roofline."""

from __future__ import annotations

from astra_sim.errors import ConfigError, WorkloadError


def node_work(node):
    """A COMP node's ``(num_ops, tensor_size)`` (a missing one 0; None without both), for models that know nothing
    better; a value that is not a non-negative integer is a WorkloadError naming the node."""
    attrs = node.attrs
    num_ops, tensor_size = attrs.get("num_ops"), attrs.get("tensor_size")
    if num_ops is None and tensor_size is None:
        return None
    for key, value in (("num_ops", num_ops), ("tensor_size", tensor_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise WorkloadError(f"{node.path}: node {node.id} ({node.name!r}): attribute {key!r} must be a "
                                f"non-negative integer, got {value!r}")
    return num_ops or 0, tensor_size or 0


class ReplayModel:
    """Every COMP node takes ``duration_micros`` x 1000 ns (1 ns when zero)."""

    name = "replay"
    foldable = True  # a node's time depends on the node only

    def __init__(self, context=None):
        pass

    def compute_time_ns(self, node, rank):
        return node.duration_micros * 1000 if node.duration_micros else 1


class RooflineModel:
    """``t = num_ops / min(local_mem_bw x num_ops / tensor_size, peak_perf)``, truncated to ns, in the reference's
    units (``local-mem-bw`` GB/s, ``peak-perf`` TFLOP/s); a node with ``tensor_size`` 0 takes no time at all."""

    name = "roofline"
    foldable = True

    def __init__(self, context):
        cfg = context.system_config
        self.bandwidth = cfg.local_mem_bw_bytes_per_s
        self.peak = cfg.peak_perf_flops
        if self.bandwidth <= 0 or self.peak <= 0:
            raise ConfigError(
                f"{cfg.path}: the roofline model needs 'local-mem-bw' (GB/s) and 'peak-perf' (TFLOP/s) > 0"
            )

    def compute_time_ns(self, node, rank):
        num_ops = node.attrs.get("num_ops")
        tensor_size = node.attrs.get("tensor_size")
        for key, value in (("num_ops", num_ops), ("tensor_size", tensor_size)):
            if value is None or isinstance(value, bool) or not isinstance(value, int):
                raise WorkloadError(
                    f"{node.path}: node {node.id} ({node.name!r}): the roofline model needs integer "
                    f"attribute {key!r} on every GPU COMP node"
                    + ("" if value is None else f", got {value!r}")
                )
        if tensor_size == 0:
            return None
        if num_ops == 0:
            # 0 / 0 in the reference (undefined); converted PyTorch traces often carry it: no operations, no time
            return 0
        intensity = float(num_ops) / float(tensor_size)
        perf = min(self.bandwidth * intensity, self.peak)
        return int(float(num_ops) / perf * 1e9)
