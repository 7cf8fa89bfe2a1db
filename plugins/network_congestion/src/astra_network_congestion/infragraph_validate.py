"""Checks of an InfraGraph ``Infrastructure`` before the package expands it (:mod:`.infragraph`): every name
defined once and used where defined, every index and slice in range, and the expansion's size bounded, so that a
bad or hostile file is a one-line error naming the device, instance or edge, never a hang or an exception from
deep inside the package."""

from __future__ import annotations

import re

from astra_sim.errors import ConfigError
from astra_sim.limits import MAX_TOTAL_NPUS
from astra_sim.safeio import brief


def _slice_indices(expr, count, where):
    """Indices of ``name[expr]`` for a component/instance with ``count`` copies; bounds are checked."""
    if expr is None or expr.strip() in ("", ":"):
        return range(count)  # (lazy: a count of 10^18 is refused later, by _check_size)
    parts = expr.split(":")
    try:
        numbers = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise ConfigError(f"{where}: cannot read the index/slice [{expr[:40]}]") from None
    if len(parts) == 1:
        index = numbers[0]
        if not -count <= index < count:
            raise ConfigError(f"{where}: index [{expr[:40]}] is out of range (there are {brief(count)})")
        return [index % count]
    if len(parts) > 3:
        raise ConfigError(f"{where}: cannot read the slice [{expr[:40]}]")
    for bound in numbers[:2]:
        if bound is not None and not -count <= bound <= count:
            raise ConfigError(f"{where}: slice [{expr[:40]}] reaches past the {brief(count)} that exist")
    step = numbers[2] if len(numbers) == 3 else None
    if step == 0:
        raise ConfigError(f"{where}: slice [{expr[:40]}] has step 0")
    return range(*slice(numbers[0], numbers[1], step).indices(count))


_SEGMENT = re.compile(r"^([A-Za-z0-9_-]+)(?:\[([^\]]*)\])?$")


def _check_edge_link(where, edge, links, owner):
    """An edge must use a link its ``owner`` (a device or the infrastructure) defines, with a supported scheme."""
    if edge.link not in links:
        raise ConfigError(
            f"{where} uses link {brief(edge.link)}, which {owner} does not define "
            f"(its links: {brief(', '.join(sorted(links))) if links else 'none'})"
        )
    if edge.scheme not in (None, "one2one", "many2many"):
        raise ConfigError(f"{where}: scheme {brief(edge.scheme)} is not supported (use one2one or many2many)")


def _check_component_path(devices, device_name, text, where):
    """``xpu[0:4]`` or ``cx5[0:2].port[0]``: every segment a component, every index in range. Returns how many
    endpoints the path names."""
    current = device_name
    endpoints = 1
    for segment in str(text).split("."):
        match = _SEGMENT.match(segment.strip())
        if not match:
            raise ConfigError(f"{where}: cannot read endpoint {brief(text)}")
        name, expr = match.groups()
        components = {c.name: c for c in devices[current].components}
        if name not in components:
            raise ConfigError(
                f"{where}: endpoint {brief(text)}: device {brief(current)} has no component {brief(name)} "
                f"(it has {brief(', '.join(sorted(components))) if components else 'none'})"
            )
        endpoints *= len(_slice_indices(expr, components[name].count, f"{where}: endpoint {brief(text)}"))
        if components[name].choice == "device":
            current = name
    return endpoints


def _device_nodes(devices, name, path, inside=()):
    """Nodes one device ``name`` expands to (its components, nested devices' counted through)."""
    if name in inside:
        chain = " > ".join(map(brief, inside + (name,)))
        raise ConfigError(f"{path}: device {brief(name)} contains itself ({chain})")
    return sum(c.count * (_device_nodes(devices, c.name, path, inside + (name,)) if c.choice == "device" else 1)
               for c in devices[name].components)


#: Steps infragraph may take to expand the devices' edges: it adds each device's edges once per component of the
#: device (infragraph_service._generate_composed_edges), about 100,000 steps a second on this project's 2-core CI
#: machine (the DGX sample with 300 GPUs: about 470,000 steps, 4 s; with 1,000 GPUs, 4 million, 46 s), so this
#: bound is about 10 s. Nested devices' own edges are not counted.
MAX_EXPANSION_STEPS = 1_000_000


def _check_size(devices, instances, path, device_edges):
    """At most MAX_TOTAL_NPUS nodes and MAX_EXPANSION_STEPS steps: expanding more takes infragraph minutes and
    gigabytes (a count of 10^18 never ends). ``device_edges``: edges each device expands to."""
    total = sum(i.count * _device_nodes(devices, i.device, path) for i in instances.values())
    if total > MAX_TOTAL_NPUS:
        raise ConfigError(f"{path}: the infrastructure expands to {brief(total)} nodes, more than the "
                          f"{MAX_TOTAL_NPUS:,} accepted (instance and component counts multiply)")
    steps = sum(i.count * _device_nodes(devices, i.device, path) * device_edges.get(i.device, 0)
                for i in instances.values())
    if steps > MAX_EXPANSION_STEPS:
        raise ConfigError(f"{path}: the devices' edges would take infragraph {brief(steps)} steps to expand (each "
                          f"device's components x its edges, per instance), more than the {MAX_EXPANSION_STEPS:,} "
                          "accepted (about 10 s): fewer components per device, or more devices")


def validate_infrastructure(infra, path):
    """Raise :class:`ConfigError` naming the first problem of ``infra`` (read from ``path``)."""
    devices, device_edges = {}, {}
    for device in infra.devices:
        if device.name in devices:
            raise ConfigError(f"{path}: device {brief(device.name)} is defined twice")
        devices[device.name] = device
    for device in infra.devices:
        where = f"{path}: device {brief(device.name)}"
        names = set()
        for component in device.components:
            if component.name in names:
                raise ConfigError(f"{where}: component {brief(component.name)} is defined twice")
            names.add(component.name)
            if component.count is None or component.count < 1:
                raise ConfigError(f"{where}: component {brief(component.name)} needs count >= 1")
            if component.choice == "device" and component.name not in devices:
                raise ConfigError(
                    f"{where}: component {brief(component.name)} has choice 'device' but no device of that name "
                    "exists"
                )
        links = {link.name for link in device.links}
        device_edges[device.name] = 0
        for index, edge in enumerate(device.edges):
            ewhere = f"{where}: edges[{index}]"
            _check_edge_link(ewhere, edge, links, "the device")
            ends = []
            for end in (edge.ep1, edge.ep2):
                if end is None or not end.component:
                    raise ConfigError(f"{ewhere}: both ends need a 'component'")
                text = f"{end.device}.{end.component}" if end.device else end.component
                ends.append(_check_component_path(devices, device.name, text, ewhere))
            n1, n2 = ends
            device_edges[device.name] += n1 * n2 if edge.scheme == "many2many" else max(n1, n2)
    instances = {}
    for instance in infra.instances:
        if instance.name in instances:
            raise ConfigError(f"{path}: instance {brief(instance.name)} is defined twice")
        if instance.device not in devices:
            raise ConfigError(
                f"{path}: instance {brief(instance.name)} uses unknown device {brief(instance.device)} "
                f"(devices: {brief(', '.join(sorted(devices))) if devices else 'none'})"
            )
        if instance.count is None or instance.count < 1:
            raise ConfigError(f"{path}: instance {brief(instance.name)} needs count >= 1")
        instances[instance.name] = instance
    if not instances:
        raise ConfigError(f"{path}: the infrastructure has no instances, so no nodes")
    _check_size(devices, instances, path, device_edges)
    links = {link.name for link in infra.links}
    for index, edge in enumerate(infra.edges):
        where = f"{path}: edges[{index}]"
        _check_edge_link(where, edge, links, "the infrastructure")
        for end in (edge.ep1, edge.ep2):
            if end is None or not end.instance or not end.component:
                raise ConfigError(f"{where}: both ends need 'instance' and 'component'")
            match = _SEGMENT.match(end.instance.strip())
            if not match or match.group(1) not in instances:
                raise ConfigError(
                    f"{where}: unknown instance {brief(end.instance)} "
                    f"(instances: {brief(', '.join(sorted(instances)))})"
                )
            instance = instances[match.group(1)]
            _slice_indices(match.group(2), instance.count, f"{where}: instance {brief(end.instance)}")
            _check_component_path(devices, instance.device, end.component, where)
