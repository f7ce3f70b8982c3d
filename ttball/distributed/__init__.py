"""ttball on Ray: batch tracking of a video archive (:mod:`.archive`).

Ray is imported only when a job runs, so ``import ttball.distributed`` works without it.
"""

from ttball.distributed.archive import ArchiveReport, ArchiveSettings, run_archive, track_archive

__all__ = ["ArchiveReport", "ArchiveSettings", "run_archive", "track_archive"]
