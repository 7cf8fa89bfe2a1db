"""Placement policies."""

import random

from astra_cluster.placement import nodes_used, place, shape_key
from astra_cluster.spec import JobSpec


def job(gpus, where=None):
    return JobSpec("j", gpus, 1, 0, "micro", {}, where)


def test_contiguous_is_first_fit():
    assert place("contiguous", job(3), {9, 2, 5, 3, 8}, 4, None) == [2, 3, 5]
    assert place("contiguous", job(6), {1, 2}, 4, None) is None


def test_topology_packs_into_the_fewest_nodes():
    free = {1, 2, 3} | {4, 5, 6, 7} | {8, 9} | {12, 13, 14, 15}
    gpus = place("topology", job(6), free, 4, None)
    assert nodes_used(gpus, 4) == 2 and set(gpus) >= {4, 5, 6, 7} and set(gpus) & {8, 9} == {8, 9}
    assert place("topology", job(2), free, 4, None) == [8, 9]  # the tightest node that fits
    assert place("contiguous", job(4), free, 4, None) == [1, 2, 3, 4]  # two nodes, where one would do
    assert place("topology", job(4), free, 4, None) == [4, 5, 6, 7]


def test_random_follows_the_seed():
    free = set(range(64))
    a = place("random", job(8), free, 8, random.Random(4))
    assert a == place("random", job(8), free, 8, random.Random(4)) and a == sorted(a) and len(set(a)) == 8


def test_fixed_waits_for_its_gpus():
    assert place("fixed", job(2, [3, 1]), {1, 2, 3}, 4, None) == [3, 1]
    assert place("fixed", job(2, [3, 4]), {1, 2, 3}, 4, None) is None


def test_shape_key_forgets_which_nodes():
    assert shape_key([8, 9, 16, 17], 8) == shape_key([0, 1, 24, 25], 8) != shape_key([0, 1, 2, 3], 8)
