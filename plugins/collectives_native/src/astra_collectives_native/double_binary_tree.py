"""The double-binary-tree all-reduce: reduce up one of the dimension's two trees, then broadcast down."""

from __future__ import annotations

from astra_sim.system.collectives import ALL_REDUCE, Algorithm, mypyc_attr

# Double-binary-tree states.
_BEGIN, _TO_PARENT, _FROM_PARENT, _END, _TWO_CHILDREN, _ONE_CHILD, _TO_CHILDREN = range(7)
_EV_INIT, _EV_GENERAL, _EV_RECEIVED = range(3)


@mypyc_attr(allow_interpreted_subclasses=True)
class DoubleBinaryTree(Algorithm):
    """Tree all-reduce (the collective type is ignored, as in the reference)."""

    __slots__ = ("rank", "state", "reductions", "parent", "left_child", "right_child", "node_type")

    def __init__(self, rank, tree, data_size):
        self.rank = rank
        self.data_size = data_size
        self.final_data_size = data_size
        self.com_type = ALL_REDUCE
        self.state = _BEGIN
        self.reductions = 0
        self.parent = tree.parent[rank]
        self.left_child = tree.left[rank]
        self.right_child = tree.right[rank]
        self.node_type = tree.node_type(rank)

    def run_init(self):
        self._run(_EV_INIT)

    def run_general(self, _arg=None):
        self._run(_EV_GENERAL)

    def run_received(self, _arg=None):
        self._run(_EV_RECEIVED)

    def _to(self, peer):
        self._send(self.rank, peer, self.data_size, self._tag, None, None)

    def _from(self, peer):
        self._recv(peer, self.rank, self.data_size, self._tag, self._received, None)

    def _run(self, event):
        state, kind = self.state, self.node_type
        if kind == "leaf":
            if state == _BEGIN:
                self.bundle(self.data_size, False)
                self.state = _TO_PARENT
            elif state == _TO_PARENT:
                self._to(self.parent)
                self._from(self.parent)
                self.state = _FROM_PARENT
            elif state == _FROM_PARENT:
                self.bundle(self.data_size, False)
                self.state = _END
            elif state == _END:
                self.finish()
        elif kind == "intermediate":
            if state == _BEGIN:
                self.state = _TWO_CHILDREN
                self._from(self.left_child)
                self._from(self.right_child)
            elif state == _TWO_CHILDREN and event == _EV_RECEIVED:
                self.bundle(self.data_size, True)
                self.state = _ONE_CHILD
            elif state == _ONE_CHILD and event == _EV_RECEIVED:
                self.bundle(self.data_size, True)
                self.state = _TO_PARENT
            elif self.reductions < 1 and event == _EV_GENERAL:
                self.reductions += 1
            elif state == _TO_PARENT:
                self.state = _FROM_PARENT
                self._to(self.parent)
                self._from(self.parent)
            elif state == _FROM_PARENT and event == _EV_RECEIVED:
                self.bundle(self.data_size, True)
                self.state = _TO_CHILDREN
            elif state == _TO_CHILDREN:
                self._to(self.left_child)
                self._to(self.right_child)
                self.finish()
        else:  # root
            only_child = self.left_child if self.left_child >= 0 else self.right_child
            if state == _BEGIN:
                self.state = _ONE_CHILD
                self._from(only_child)
            elif state == _ONE_CHILD:
                self.bundle(self.data_size, True)
                self.state = _TO_CHILDREN
            elif state == _TO_CHILDREN:
                self._to(only_child)
                self.finish()
