"""``tracejit.dask``: jit functions on a Dask cluster (``pip install 'tracejit[dask]'``).

The code lives in ``tracejit.runtime.dask``; its docstring says how entries are shipped
and what a worker trusts.
"""

from tracejit.runtime.dask import map_blocks, share_cache, ship, worker_stats

__all__ = ["map_blocks", "share_cache", "ship", "worker_stats"]
