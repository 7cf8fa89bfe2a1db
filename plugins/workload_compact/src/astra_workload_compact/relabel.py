"""Relabelling a class's trace for another rank of its class: every ``comm_src`` / ``comm_dst`` rank ``x`` becomes
``h(x)`` and every ``pg_name`` the group whose members are ``h`` of its members (see the package docstring)."""

from __future__ import annotations

from astra_sim.chakra import EtNode
from astra_sim.errors import WorkloadError
from astra_folding.symmetry import group_key

#: Attributes that name ranks or communicators: the ones a relabelling changes.
RANK_ATTRS = ("comm_src", "comm_dst")


class Relabeller:
    """Turns a class's trace into the trace of another member of the class (see the module docstring)."""

    def __init__(self, symmetry, groups, where):
        self.symmetry = symmetry
        self.groups = groups or {}
        self.where = where
        by_members = {}
        for group_id in sorted(self.groups):
            by_members.setdefault(group_key(self.groups[group_id], "set"), []).append(group_id)
        self._by_members = by_members
        self._images = {}
        self._cycles = {}  # (shift index, group id) -> (the group's cycle under that shift, its place in it)

    def group_image(self, group_id, offsets):
        """The id of the group holding the images of ``group_id``'s members under ``offsets``. The shifts of
        different digits commute, so the image is taken one digit at a time, along each group's cycle under
        that digit's shift (built once: a run's images cost its groups' members once per shift, not once per
        rank)."""
        key = (group_id, offsets)
        image = self._images.get(key)
        if image is None:
            image = group_id
            for index, steps in enumerate(offsets):
                if steps:
                    image = self._along_cycle(image, index, steps)
            self._images[key] = image
        return image

    def _along_cycle(self, group_id, index, steps):
        found = self._cycles.get((index, group_id))
        if found is None:
            one_step = tuple(1 if i == index else 0 for i in range(len(self.symmetry.shifts)))
            cycle = [group_id]
            while True:
                nxt = self._image_now(cycle[-1], one_step)
                if nxt == group_id:
                    break
                cycle.append(nxt)
            for position, member in enumerate(cycle):
                self._cycles[(index, member)] = (cycle, position)
            found = self._cycles[(index, group_id)]
        cycle, position = found
        return cycle[(position + steps) % len(cycle)]

    def _image_now(self, group_id, offsets):
        members = self.groups.get(group_id)
        if members is None:
            raise WorkloadError(f"{self.where}: pg_name {group_id} is not a communicator group of the run")
        moved = group_key([self.symmetry.moved(m, offsets) for m in members], "set")
        same = self._by_members[group_key(members, "set")]
        targets = self._by_members.get(moved)
        if targets is None or len(targets) != len(same):
            raise WorkloadError(f"{self.where}: communicator group {group_id}, relabelled for another rank of "
                                "its class, is not a communicator group (the groups file does not hold the "
                                "images of its members)")
        return targets[same.index(group_id)]

    def nodes_for(self, nodes, offsets):
        """The nodes of the rank at ``offsets`` from the representative (nodes without ranks are shared)."""
        if not any(offsets):
            return nodes
        moved = self.symmetry.moved
        out = []
        for node in nodes:
            attrs = node.attrs
            if "comm_src" not in attrs and "comm_dst" not in attrs and "pg_name" not in attrs:
                out.append(node)
                continue
            new_attrs = dict(attrs)
            for key in RANK_ATTRS:
                value = attrs.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    new_attrs[key] = moved(value, offsets)
            pg = attrs.get("pg_name")
            if pg not in (None, "", "0", 0):
                try:
                    group_id = int(pg)
                except (TypeError, ValueError):
                    group_id = None
                if group_id is not None:
                    image = self.group_image(group_id, offsets)
                    new_attrs["pg_name"] = str(image) if isinstance(pg, str) else image
            out.append(EtNode(node.id, node.name, node.type, node.ctrl_deps, node.data_deps, node.duration_micros,
                              node.inputs_values, new_attrs, node.path, node._kinds, None, node.inputs_shapes,
                              node.inputs_types))
        return out
