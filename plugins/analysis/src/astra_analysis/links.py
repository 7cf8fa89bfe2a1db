"""Link use over time, for the timeline's counter tracks and the link heat map.

A network backend with links (``congestion``, ``flow``) offers ``record_link_load(load)``; the run calls it
before it starts when a timeline is asked for, and the backend then reports every interval a link carries
traffic with :meth:`LinkLoad.add` (``level``: the fraction of the link's bandwidth in use). Memory stays
bounded: each link keeps ``max_bins`` bins, and when time runs past the last bin every link's bins are
merged pairwise and the bin width doubles.
"""

from __future__ import annotations


class LinkLoad:
    """Per link, the bandwidth-time it carried in each time bin."""

    def __init__(self, width_ns=1000, max_bins=256):
        self.width = int(width_ns)
        self.max_bins = int(max_bins)
        self.bins = {}  # link -> [ns x level per bin]
        self.names = {}  # link -> a name for the timeline ("npu 3 -> switch 0")

    def add(self, link, t0, t1, level=1.0):
        """Link ``link`` carried traffic at ``level`` of its bandwidth from ``t0`` to ``t1`` (ns)."""
        if t1 <= t0:
            return
        while t1 > self.width * self.max_bins:
            self._coarsen()
        bins = self.bins.get(link)
        if bins is None:
            bins = self.bins[link] = [0.0] * self.max_bins
        width = self.width
        first = int(t0 // width)
        last = int((t1 - 1) // width)
        if first == last:
            bins[first] += (t1 - t0) * level
            return
        bins[first] += ((first + 1) * width - t0) * level
        for k in range(first + 1, last):
            bins[k] += width * level
        bins[last] += (t1 - last * width) * level

    def _coarsen(self):
        half = self.max_bins // 2
        for link, bins in self.bins.items():
            merged = [bins[2 * k] + bins[2 * k + 1] for k in range(half)]
            merged.extend([0.0] * (self.max_bins - half))
            self.bins[link] = merged
        self.width *= 2

    def utilisation(self, end_ns):
        """``{link: [use of bin 0, use of bin 1, ...]}`` (0..1) for the bins up to ``end_ns``, and the bin width."""
        count = max(1, -(-int(end_ns) // self.width)) if end_ns else 1
        count = min(count, self.max_bins)
        out = {}
        for link in sorted(self.bins):
            bins = self.bins[link]
            out[link] = [min(1.0, round(b / self.width, 4)) for b in bins[:count]]
        return out, self.width

    def name(self, link):
        return self.names.get(link, f"link {link}")


def utilisation_summary(load, end_ns, top=64):
    """The report's ``network_stats.link_utilisation``: the ``top`` busiest links' use per bin (for the heat map
    of ``astra plot``), busiest first."""
    series, width = load.utilisation(end_ns)
    busiest = sorted(series, key=lambda link: (-sum(series[link]), link))[:top]
    return {"bin_ns": width, "links": [{"link": link, "name": load.name(link), "utilisation": series[link]}
                                       for link in busiest]}
