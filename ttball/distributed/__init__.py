"""ttball on Ray: batch tracking of a video archive (:mod:`.archive`) and the worker as a Ray
Serve application (:mod:`.serve`, with ``serve_ingress``, ``serve_routes``, ``serve_stream``,
``serve_replica``, ``serve_router`` and ``serve_metrics``).

Ray is imported only when a job or an application runs, so ``import ttball.distributed`` works
without it.
"""

from ttball.distributed.archive import ArchiveReport, ArchiveSettings, run_archive, track_archive
from ttball.distributed.serve import RayServeSettings, build_app, run_serve

__all__ = ["ArchiveReport", "ArchiveSettings", "RayServeSettings", "build_app", "run_archive",
           "run_serve", "track_archive"]
