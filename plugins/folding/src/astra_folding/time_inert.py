"""The pre-posted receives still waiting, kept from look to look (time folding: they are the trace's future, not
the state, :meth:`~astra_folding.time_fold.TimeFolder._preposted`). The LLM generator posts every receive at the
start, tens of thousands a run: sorting them out of the matcher's waiting messages at every look made a look cost
about 60 ms on the MLPerf GPT-3 layout (8 ranks, 16 micro-batches), so looks came many passes apart and the
shorter periods were never seen. Kept here, a look costs the state's size plus set operations done in C."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import filterfalse

from astra_sim.system.frontend import Message

from astra_folding import time_host
from astra_folding.time_jump import message_key, wrap_tag


class InertReceives:
    """The lone pre-posted receive waiting under each key of the matcher, per rank and per channel. A message waits
    unchanged while it is the lone value of its key (the matcher replaces the value, by a deque or by nothing, when
    another message of the key comes), so a key whose value is still the same object is still inert; those that
    are gone (matched) or changed are found by a membership test in C. The set only shrinks: receives without
    parents are posted at the start (and a jump keeps the same objects under the same keys). Between looks only
    the keys that a send or receive posted since looked up can have changed (and those not cached then): a look
    reads those, and the count of waiting keys checks that nothing else did."""

    def __init__(self, matcher, preposted, ranks):
        self.matcher = matcher
        self.preposted = preposted  # TimeFolder._preposted
        self.known = {}  # key -> the lone pre-posted Message waiting under it
        self.by_rank = {r: {} for r in ranks}  # rank -> {node id: key}
        self.by_channel = {}  # (src, dst, size) -> {tag: node id}
        self._sorted = {}  # (src, dst, size) -> the channel's tags ever known, sorted (see candidates)
        self.live = set()  # the keys the last update found not cached
        self.full = True  # the next update looks at every key (the first, and the first after a jump)

    def update(self, changed=None):
        """Bring the cache to the matcher's waiting messages. ``changed``: the keys that may have changed since the
        last update (every key a send or receive posted since then looks up: :meth:`TimeFolder._changed_keys`), or
        None for a full pass (in C, but for the new keys). Returns the keys whose messages are not all cached: the
        state's, and any pre-posted receive that shares its key with another message (then in a deque)."""
        waiting, known = self.matcher._waiting, self.known
        if changed is None or self.full:
            self.full = False
            if known:
                for key, _m in list(filterfalse(waiting.items().__contains__, known.items())):
                    self._drop(key)
            fresh = waiting.keys() - known.keys()
        else:
            fresh = set()
            for key in changed | self.live:
                m = known.get(key)
                if m is not None and waiting.get(key) is not m:
                    self._drop(key)  # matched, or another message came under its key
                if key in waiting and key not in known:
                    fresh.add(key)
        live = set()
        preposted, by_rank, by_channel, order = self.preposted, self.by_rank, self.by_channel, self._sorted
        for key in fresh:  # (the first look: every pre-posted receive, tens of thousands)
            head = waiting[key]
            if head.__class__ is Message and preposted(head):
                known[key] = head
                arg = head.recv_arg
                by_rank[key[2]][arg] = key
                channel = key[1:]
                tags = by_channel.get(channel)
                if tags is None:
                    tags = by_channel[channel] = {}
                else:
                    order.pop(channel, None)
                tags[key[0]] = arg
            else:
                live.add(key)
        if len(known) + len(live) != len(waiting):  # a change no poster since the last look made: look at every key
            self.full = True
            return self.update()
        self.live = live
        return live

    def after_jump(self, used, moved_keys):
        """A jump rebuilt the matcher's waiting messages: the pre-posted receives it ``used`` (per rank, node ids)
        are gone, the other messages waiting moved to ``moved_keys``; every other cached one stayed as it was (the
        same object under the same key). The next update checks the count, and looks at every key if it is off."""
        for rank, nodes in used.items():
            keys = self.by_rank[rank]
            for n in nodes:
                key = keys.get(n)
                if key is not None:
                    self._drop(key)
        self.live = set(moved_keys)
        self.full = False

    def _drop(self, key):
        m = self.known.pop(key)
        del self.by_rank[key[2]][m.recv_arg]
        del self.by_channel[key[1:]][key[0]]

    def receives(self, live):
        """Per rank the pre-posted receives still waiting: {rank: {node id: key}} (the cached ones, plus those in
        the ``live`` keys' deques, in a copy then)."""
        extra = [(key, m) for key in live for m in _messages(self.matcher._waiting[key]) if self.preposted(m)]
        if not extra:
            return self.by_rank
        out = {r: dict(d) for r, d in self.by_rank.items()}
        for key, m in extra:
            out[key[2]][m.recv_arg] = key
        return out

    def candidates(self, channel, low, high, step, limit):
        """The (tag, node id) of the channel's cached receives that a repeat's lookup may find when the period looked
        tags ``low..high`` up and they step by ``step`` (> 0) per period, ``limit`` periods at most: those between
        ``low + step`` and ``high + limit * step`` and those below ``limit * step`` (where a tag moved back may
        wrap); every other one is found by none (TimeFolder._preposted_repeats' ranges are empty there)."""
        tags = self.by_channel.get(channel)
        if not tags:
            return []
        order = self._sorted.get(channel)
        if order is None:
            order = self._sorted[channel] = sorted(tags)
        spans = ((bisect_left(order, low + step), bisect_right(order, high + limit * step)),
                 (0, bisect_left(order, limit * step)))
        seen = set()
        out = []
        for start, end in spans:
            for tag in order[start:end]:
                y = tags.get(tag)
                if y is not None and tag not in seen:
                    seen.add(tag)
                    out.append((tag, y))
        return out


def to_check(cache, inert, tags_of, tag_steps, bounds, limit):
    """The pre-posted receives :meth:`~astra_folding.time_fold.TimeFolder._preposted_repeats` checks, as ((src, dst,
    size), tag, node id): every one on a channel the period looked up, but, from the ``cache`` (when looks keep
    one), on a channel whose tags step up only those whose range of periods is not empty (the others are skipped
    there too)."""
    if cache is None or inert is not cache.by_rank:  # not kept, or a pre-posted receive shares its key: all
        return [((src, dst, size), tag, y) for dst, keys in inert.items()
                for y, (tag, src, _dst, size) in keys.items() if tags_of.get((src, dst, size))]
    out = []
    for channel in tags_of:
        step = tag_steps.get(channel)
        if step is not None and step > 0:
            low, high = bounds[channel]
            out += [(channel, tag, y) for tag, y in cache.candidates(channel, low, high, step, limit)]
        else:
            out += [(channel, tag, y) for tag, y in cache.by_channel.get(channel, {}).items()]
    return out


def _messages(head):
    return [head] if head.__class__ is Message else list(head)


def preposted_repeats(folder, limit, touched, shift, tag_steps, inert, log):
    """How many repeats the pre-posted receives allow (``folder``: the :class:`~astra_folding.time_fold.TimeFolder`):
    every pre-posted receive a repeat's node finishes or matches must be waiting now (posted at the start, not yet
    used), and a pre-posted receive that a repeat's send or receive looks up (its key is a key the period looked
    up, moved) must be the image of a node the period touched, with the same signature: then every lookup of the
    repeats finds what the period's found, moved. Returns ``limit`` or fewer.

    The keys the period looked up are taken as those of the touched sends and receives dispatched by now (B):
    every node the period dispatched is touched (finished since A, or running at B), and a node not dispatched
    yet (not issued, or waiting for its host's launch) looks its key up in a repeat, as the image of one the
    period dispatched: counting it too would ask a pre-posted receive that a repeat finds to be the image of
    one touched one period too late."""
    now = folder.engine.now
    looked_up = set()
    for rank, ids in touched.items():
        w = folder.by_rank[rank]
        nodes, starts, left, waiting = w.nodes, w.node_start_ns, w.parents_left, None
        held = (time_host.undispatched(w)
                if w.host is not None and (rank not in folder.posting or rank in folder.ahead_now) else ())
        for node_id in ids:
            key = message_key(rank, nodes.get(node_id), folder.symmetry)
            if key is None or starts.get(node_id, now) > now or left.get(node_id, 0) > 0 or node_id in held:
                continue  # not a send or receive, or waiting for its launch (held too) or its parents
            if waiting is None:
                waiting = w.waiting()
            if node_id not in waiting:  # (a ready node waits for its slot)
                looked_up.add(key)
    tags_of = {}
    for tag, src, dst, size in looked_up:
        tags_of.setdefault((src, dst, size), set()).add(tag)
    bounds = {channel: (min(tags), max(tags)) for channel, tags in tags_of.items()}
    for (src, dst, size), tag, y in to_check(folder.inert_cache, inert, tags_of, tag_steps, bounds, limit):
        tags = tags_of[(src, dst, size)]
        step = tag_steps.get((src, dst, size))  # a touched node looked the channel up: it has one
        if step is None:
            return 0
        if step > 0 and tag - limit * step >= 0:  # no wrap: only the j that land between the period's tags
            low, high = bounds[(src, dst, size)]
            steps = range(max(1, -((high - tag) // step)), min(limit, (tag - low) // step) + 1)
        else:
            steps = range(1, limit + 1)
        hits = [j for j in steps if wrap_tag(tag - j * step) in tags]
        for j in hits:
            x = y - j * shift[dst]
            if x not in touched[dst] or not folder._alike(dst, x, y, j * step):
                limit = j - 1
                break
    running = {w.rank: w.node_start_ns for w in folder.workloads}
    ends = [(rank, n) for rank, n, _s, _e in log if n in folder.root_recvs[rank]]
    ends += [(w.rank, n) for w in folder.workloads  # (set operations in C: the trace posts thousands at the start)
             for n in (w.node_start_ns.keys() & folder.root_recvs[w.rank]) - inert[w.rank].keys()]
    for rank, n in ends:
        j = 1
        while j <= limit and n + j * shift[rank] in running[rank]:
            j += 1
        limit = min(limit, j - 1)
    return limit
