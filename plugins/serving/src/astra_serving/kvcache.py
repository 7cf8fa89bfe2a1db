"""The paged KV cache of one replica: ``blocks`` blocks of ``block_size`` token positions (vLLM's
PagedAttention). A sequence holds ceil(positions / block_size) blocks. With prefix caching, the full blocks of
a shared prompt prefix (requests of one ``prefix_group``) are kept after their requests finish, found by
(group, block index), shared by reference count and evicted least recently used when blocks run out."""

from __future__ import annotations

from collections import OrderedDict


class BlockManager:
    def __init__(self, blocks, block_size, prefix_caching=False):
        if blocks < 1:
            raise ValueError("a KV cache needs at least one block")
        self.total = int(blocks)
        self.block_size = int(block_size)
        self.prefix_caching = prefix_caching
        self.free = self.total           # blocks holding nothing
        self.owned = {}                  # seq id -> private blocks
        self.shared = {}                 # seq id -> [prefix keys it references]
        self.refs = {}                   # prefix key -> reference count (cached blocks)
        self.evictable = OrderedDict()   # cached prefix keys with no reference, oldest first
        self.hits = 0                    # prefix tokens found cached (admitted sequences)
        self.lookups = 0                 # prefix tokens looked up (admitted sequences)

    # ------------------------------------------------------------------ accounting
    @property
    def used(self):
        """Blocks holding a live sequence's positions (cached but unreferenced prefix blocks count as free)."""
        return self.total - self.free - len(self.evictable)

    def available(self):
        return self.free + len(self.evictable)

    def blocks_of(self, seq_id):
        return self.owned.get(seq_id, 0) + len(self.shared.get(seq_id, ()))

    def needed(self, seq_id, positions):
        """More blocks the sequence needs to hold ``positions`` positions."""
        return max(0, -(-positions // self.block_size) - self.blocks_of(seq_id))

    def take(self, n):
        """Take ``n`` blocks, the free ones first, then the least recently used cached prefix blocks; False
        (nothing taken) when they are not there. :meth:`grow` counts them as a sequence's at once; the engine's
        lazy decoders count theirs when they leave the group (:meth:`assign`)."""
        if n <= self.free:  # the common case, without evictions
            self.free -= n
            return True
        if n > self.available():
            return False
        from_free = min(n, self.free)
        self.free -= from_free
        for _ in range(n - from_free):  # evict the least recently used cached prefix blocks
            key, _ = self.evictable.popitem(last=False)
            del self.refs[key]
        return True

    # ------------------------------------------------------------------ sequences
    def grow(self, seq_id, positions):
        """Hold ``positions`` positions; False (nothing changed) when the blocks are not there."""
        owned = self.owned.get(seq_id, 0)
        n = -(-positions // self.block_size) - owned - len(self.shared.get(seq_id, ()))  # needed(), inlined
        if n <= 0:
            return True
        if not self.take(n):
            return False
        self.owned[seq_id] = owned + n
        return True

    def assign(self, seq_id, n):
        """Count ``n`` blocks taken earlier with :meth:`take` as the sequence's own."""
        if n:
            self.owned[seq_id] = self.owned.get(seq_id, 0) + n

    def release(self, seq_id, keep_prefix=None):
        """Free the sequence's blocks. ``keep_prefix`` (group, full blocks): with prefix caching, its first
        blocks stay cached under the group's keys."""
        owned = self.owned.pop(seq_id, 0)
        for key in self.shared.pop(seq_id, []):
            self._unref(key)
        if self.prefix_caching and keep_prefix and owned:
            group, full = keep_prefix
            cached = 0
            for i in range(full):
                if cached >= owned:
                    break
                key = (group, i)
                if key in self.refs:
                    continue
                self.refs[key] = 0
                self.evictable[key] = None
                cached += 1
            owned -= cached
        self.free += owned

    def _unref(self, key):
        self.refs[key] -= 1
        if self.refs[key] == 0:
            self.evictable[key] = None
            self.evictable.move_to_end(key)

    def match_prefix(self, seq_id, group, prefix_tokens):
        """Reference the cached blocks of the group's prefix (consecutive from block 0); the cached tokens."""
        if not self.prefix_caching or group is None:
            return 0
        full = prefix_tokens // self.block_size
        keys = []
        for i in range(full):
            key = (group, i)
            if key not in self.refs:
                break
            keys.append(key)
        for key in keys:
            if self.refs[key] == 0:
                self.evictable.pop(key, None)
            self.refs[key] += 1
        if keys:
            self.shared.setdefault(seq_id, []).extend(keys)
        return len(keys) * self.block_size

    def count_match(self, group, prefix_tokens, cached):
        """Count an admitted sequence's prefix lookup (the hit rate's terms)."""
        if self.prefix_caching and group is not None:
            self.lookups += prefix_tokens // self.block_size * self.block_size
            self.hits += cached

    def has_prefix(self, group):
        return self.prefix_caching and (group, 0) in self.refs
