"""Fixtures of the Python package's tests: a daemon of this build on a
private socket (COLLECTIVED_DAEMON_BIN; tests/python/run.sh sets it), and
`run_ranks`, which runs one function per rank in threads of this process,
each rank with its own Client (session), joined to a fresh key."""
import concurrent.futures
import os
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest

import collectived


@pytest.fixture(scope="session")
def daemon():
    binary = os.environ.get("COLLECTIVED_DAEMON_BIN")
    if not binary or not os.path.exists(binary):
        pytest.fail("COLLECTIVED_DAEMON_BIN names no daemon (run through tests/python/run.sh)")
    work = tempfile.mkdtemp(prefix="collectived-py-")
    sock = os.path.join(work, "c.sock")
    log = open(os.path.join(work, "daemon.log"), "w")
    args = [binary, "--socket", sock, "--log-level", "warn", "--op-timeout-ms", "5000", "--join-timeout-ms", "10000"]
    args += os.environ.get("COLLECTIVED_DAEMON_ARGS", "").split()
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    else:
        p.kill()
        pytest.fail("the daemon did not start: " + open(log.name).read())
    yield sock
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:  # a failed test's client may still hold a session
        p.kill()
        p.wait()
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def run_ranks(daemon):
    """run_ranks(world, fn, **communicator_kwargs) -> [fn(comm) of each rank]."""

    def run(world, fn, **kwargs):
        key = "py-" + uuid.uuid4().hex

        def one(rank):
            with collectived.Client(daemon, name=f"pytest rank {rank}") as client:
                with client.communicator(key, world, rank, **kwargs) as comm:
                    return fn(comm)

        with concurrent.futures.ThreadPoolExecutor(world) as ex:
            futures = [ex.submit(one, r) for r in range(world)]
            return [f.result(timeout=120) for f in futures]

    return run
