import pytest


@pytest.fixture
def gemm_then_all_reduce(tmp_path):
    """Four ranks, rank r: a GEMM of (2 + r) us, then a 64 KiB all-reduce (ranks differ, every breakdown part is
    known); ``(workload prefix, system path, network path)``."""
    from astra_sim.chakra import make_metadata, make_node, types as T, write_et
    from astra_sim_testing import write_network_config, write_system_config

    (tmp_path / "t").mkdir()
    for rank in range(4):
        nodes = [make_node(0, "aten::mm", T.COMP_NODE, attrs={"is_cpu_op": False}, duration_micros=2 + rank),
                 make_node(1, "ar", T.COMM_COLL_NODE, data_deps=[0],
                           attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 16})]
        write_et(tmp_path / "t" / f"w.{rank}.et", make_metadata(), nodes)
    system = write_system_config(tmp_path / "sys.json")
    network = write_network_config(tmp_path / "net.yml", npus=(4,))
    return str(tmp_path / "t" / "w"), str(system), str(network)
