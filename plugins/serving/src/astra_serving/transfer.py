"""The KV cache's trip from a prefill replica to a decode replica, timed by the network backend.

Both replicas have the same layout and sit on different nodes of the platform (the prefill replica's nodes,
then the decode replica's). Every GPU of the prefill replica sends its share of the request's KV cache
(prompt tokens x its KV bytes per token) to the GPU of the same rank in the decode replica, all at once: a
Chakra workload of point-to-point sends and receives run by ``astra run`` on the platform's system and network
configurations (its fabric's NIC bandwidth per GPU, or ``nic_gbit`` Gb/s instead), in this process
(:func:`astra_sim.runner.run_spec`). The time is memoised by the
bytes, bucketed like iteration shapes (:func:`astra_serving.steptime.bucket` over KiB).
"""

from __future__ import annotations

import json
import os

import yaml

from .steptime import DEFAULT_RATIO, _pm, _quiet, bucket


class KvTransferTimer:
    def __init__(self, layout, nic_gbit=None, ratio=DEFAULT_RATIO, exact=False):
        self.layout = layout
        self.nic_gbit = nic_gbit
        self.ratio = ratio
        self.exact = exact
        self.memo = {}
        self.simulated = 0
        self.transfers = 0
        self.bytes = 0

    def transfer_ns(self, bytes_per_gpu):
        self.transfers += 1
        self.bytes += bytes_per_gpu * self.layout.gpus
        kib = -(-bytes_per_gpu // 1024)
        key = kib if self.exact else bucket(kib, self.ratio)
        if key not in self.memo:
            self.memo[key] = self.simulate(key * 1024)
        return self.memo[key]

    def simulate(self, size):
        from astra_gpu_model.platforms import network_yaml, system_json
        from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
        from astra_sim.platforms import get_platform
        from astra_sim.runner import run_spec
        from astra_sim.spec import RunSpec

        platform = get_platform(self.layout.platform, _pm())
        per_replica = self.layout.nodes * platform.gpus_per_node
        nodes = 2 * self.layout.nodes
        network = yaml.safe_load(network_yaml(platform, nodes))
        if self.nic_gbit is not None:
            network["bandwidth"][-1] = self.nic_gbit * 1e9 / 8 / 2 ** 30  # GiB/s per direction per GPU
        from astra_sim.generated import private_folder

        with private_folder("astra-kv-") as folder:  # named by this process: a SIGKILLed run's is reclaimed
            prefix = os.path.join(folder, "kv")
            for rank in range(2 * per_replica):
                nodes_list = []
                local = rank % per_replica
                if local < self.layout.gpus:
                    if rank < per_replica:
                        nodes_list.append(make_node(0, "kv_send", T.COMM_SEND_NODE, attrs={
                            "is_cpu_op": False, "comm_dst": rank + per_replica, "comm_size": size, "comm_tag": 7}))
                    else:
                        nodes_list.append(make_node(0, "kv_recv", T.COMM_RECV_NODE, attrs={
                            "is_cpu_op": False, "comm_src": rank - per_replica, "comm_size": size, "comm_tag": 7}))
                with open(f"{prefix}.{rank}.et", "wb") as handle:
                    handle.write(encode_et(make_metadata(), nodes_list))
            system = os.path.join(folder, "system.json")
            with open(system, "w") as handle:
                json.dump(system_json(platform, nodes, "ring"), handle)
            net = os.path.join(folder, "network.yml")
            with open(net, "w") as handle:
                yaml.safe_dump(network, handle)
            spec = RunSpec.from_mapping({"workload": prefix, "system": system, "network": net}, _pm(),
                                        where="astra serve: the KV transfer")
            value = int(run_spec(spec, _pm(), on_warning=_quiet).max_finish_ns)
        self.simulated += 1
        return value

    def stats(self):
        return {"transfers": self.transfers, "bytes": self.bytes, "sizes_simulated": self.simulated,
                "nic_gbit_per_gpu": self.nic_gbit}
