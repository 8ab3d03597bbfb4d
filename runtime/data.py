"""Bucketing: batches of variable-size samples that reuse compiled code.

Samples of different sizes (sentences, audio clips, images) cannot be stacked into one
array. ``BucketBatcher`` groups them the way DataLoader users do "bucketing": by length
bucket (powers of two, or edges you give) along one axis, each batch padded to a common
length with a mask saying which positions are real. Padding to the bucket's upper edge
(``pad_to="bucket"``, the default) gives every batch of a bucket the same shape, so a
compiled model runs one variant per bucket - even a model that loops over time steps.

>>> import numpy as np
>>> sequences = [np.ones(n) for n in (3, 5, 6, 7, 12, 2)]
>>> for batch in BucketBatcher(sequences, batch_size=2):
...     print(batch.data.shape, batch.lengths.tolist())
(1, 2) [2]
(1, 4) [3]
(2, 8) [5, 6]
(1, 8) [7]
(1, 16) [12]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracejit.tracer.shapes import edges_bucket, pow2_bucket


@dataclass
class Batch:
    """A padded batch. ``data`` is the stacked field (or a tuple of stacked fields when
    samples are tuples); ``mask[i, t]`` is True where sample ``i`` has real data at
    position ``t`` along the bucketed axis; ``indices`` are the samples' positions in the
    original sequence; ``bucket`` is the ``(low, high)`` length range."""

    data: object
    mask: np.ndarray
    lengths: np.ndarray
    indices: np.ndarray
    bucket: tuple


class BucketBatcher:
    """Iterate over padded batches of samples grouped by length bucket.

    ``samples``: arrays, or tuples whose field ``key`` is the variable-length array.
    ``buckets``: "pow2" (sizes (2^(k-1), 2^k]) or a sorted list of edges; with
    ``buckets=None`` samples are grouped by exact shape and nothing is padded.
    ``axis``: the variable axis of the key field. ``pad_to``: "bucket" (the bucket's upper
    edge) or "batch" (the longest sample in the batch). ``pad_fields``: which tuple fields
    are padded along ``axis`` (default: just ``key``); other fields are stacked as they are.
    ``shuffle`` with ``seed`` shuffles samples within buckets and the order of batches;
    ``drop_last`` drops each bucket's incomplete last batch.
    """

    def __init__(self, samples, batch_size, buckets="pow2", axis=0, key=0, pad_to="bucket",
                 pad_value=0, pad_fields=None, shuffle=False, seed=None, drop_last=False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        if pad_to not in ("bucket", "batch"):
            raise ValueError(f"pad_to must be 'bucket' or 'batch', not {pad_to!r}")
        self.samples = list(samples)
        self.batch_size = batch_size
        self.buckets = buckets
        self.axis = axis
        self.key = key
        self.pad_to = pad_to
        self.pad_value = pad_value
        self.tuples = bool(self.samples) and isinstance(self.samples[0], tuple)
        self.pad_fields = (key,) if pad_fields is None else tuple(pad_fields)
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self._epoch = 0

    def _field(self, sample, index):
        return sample[index] if self.tuples else sample

    def _bucket_of(self, sample):
        array = np.asarray(self._field(sample, self.key))
        if self.buckets is None:
            return ("shape", array.shape)
        length = array.shape[self.axis]
        if self.buckets == "pow2":
            bucket = pow2_bucket(length)
        else:
            bucket = edges_bucket(length, self.buckets)
        return bucket if bucket is not None else (length, length)

    def groups(self):
        """``{bucket: [sample index, ...]}`` in first-seen order."""
        groups = {}
        for index, sample in enumerate(self.samples):
            groups.setdefault(self._bucket_of(sample), []).append(index)
        return groups

    def __len__(self):
        total = 0
        for members in self.groups().values():
            full, rest = divmod(len(members), self.batch_size)
            total += full + (1 if rest and not self.drop_last else 0)
        return total

    def __iter__(self):
        rng = np.random.default_rng(None if self.seed is None else self.seed + self._epoch)
        self._epoch += 1
        plan = []
        groups = self.groups()
        for bucket in sorted(groups, key=_bucket_order):
            members = list(groups[bucket])
            if self.shuffle:
                rng.shuffle(members)
            for start in range(0, len(members), self.batch_size):
                chunk = members[start:start + self.batch_size]
                if len(chunk) < self.batch_size and self.drop_last:
                    continue
                plan.append((bucket, chunk))
        if self.shuffle:
            order = rng.permutation(len(plan))
            plan = [plan[i] for i in order]
        for bucket, chunk in plan:
            yield self._batch(bucket, chunk)

    def _batch(self, bucket, chunk):
        keys = [np.asarray(self._field(self.samples[i], self.key)) for i in chunk]
        lengths = np.array([key.shape[self.axis] for key in keys], dtype=np.int64)
        if self.buckets is None:
            width = int(lengths.max()) if len(lengths) else 0
        elif self.pad_to == "bucket":
            width = int(bucket[1])
        else:
            width = int(lengths.max())
        mask = np.arange(width)[None, :] < lengths[:, None]
        fields = range(len(self.samples[chunk[0]])) if self.tuples else [None]
        stacked = []
        for field in fields:
            values = [np.asarray(self._field(self.samples[i], field if self.tuples else 0))
                      for i in chunk]
            padded = (field if self.tuples else self.key) in self.pad_fields
            stacked.append(np.stack([self._pad(v, width) for v in values]) if padded
                           else np.stack(values))
        data = tuple(stacked) if self.tuples else stacked[0]
        return Batch(data, mask, lengths, np.array(chunk, dtype=np.int64), tuple(bucket))

    def _pad(self, array, width):
        extra = width - array.shape[self.axis]
        if extra < 0:
            raise ValueError(f"a sample of length {array.shape[self.axis]} does not fit its "
                             f"bucket's width {width}")
        widths = [(0, 0)] * array.ndim
        widths[self.axis] = (0, extra)
        return np.pad(array, widths, constant_values=self.pad_value)


def _bucket_order(bucket):
    return (0, bucket) if isinstance(bucket[0], int) else (1, str(bucket))
