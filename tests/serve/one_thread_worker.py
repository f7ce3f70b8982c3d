"""A worker started in the test's process, for the serve tests' module fixtures (imported by
test_oip.py, test_sessions.py and test_client_bad_input.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ttball.client import Client
from ttball.serve import ServeSettings, create_app
from ttball.serve.app import serve_in_thread


@contextmanager
def one_thread_worker(settings: ServeSettings) -> Iterator[Client]:
    """A client of a worker on ``settings``, ready; torch on one thread meanwhile, also for the
    test's own reference runs (two threads crawl on a busy host), restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with serve_in_thread(create_app(settings)) as url, Client(url) as client:
            client.wait_ready(timeout=90, poll=0.1)
            yield client
    finally:
        torch.set_num_threads(threads)
