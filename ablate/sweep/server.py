"""An MLflow tracking server over ablate's store, for jobs that log at the same time.

The sqlite store (runs/mlflow.db) is MLflow's embedded store and ablate's default: right for
one process. Jobs that run in parallel (a launcher of several processes, conf/hydra/launcher/)
would each open the file and race for its lock ("database is locked"); instead they log
through one server process, which alone writes the file. So:

- the sweep's callback (ablate/sweep/callbacks.py) starts one for the sweep, over the same sqlite
  file and artifact folder, when its launcher runs jobs in other processes and the store is
  a sqlite file, and points MLFLOW_TRACKING_URI at it for the jobs;
- `ablate server` (`make server`) starts one by hand, in the foreground, e.g. for a cluster's
  jobs (`--host 0.0.0.0`: anyone who can reach the port can write, so only on a trusted
  network);
- an MLFLOW_TRACKING_URI that names a server already (one backed by PostgreSQL on a
  cluster) is used as it is.

Artifacts are written by the jobs themselves into the folder beside the database
(runs/mlartifacts), as in the embedded store: the server does not proxy them
(`--no-serve-artifacts`), so that runs logged with and without a server lie together.

    ablate server [--port 5000] [--host 127.0.0.1]   # python -m ablate.sweep.server
    ablate ui                                        # MLflow's UI on the store
"""
import argparse
import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ablate.sweep.tracking import sqlite_path, tracking_uri


def command(db_uri, host="127.0.0.1", port=5000, workers=1):
    """`mlflow server` over a sqlite store, its artifacts beside it. One worker: a single
    process writes the file, so its writes never race each other's lock."""
    path = sqlite_path(db_uri)
    if path is None:
        raise ValueError(f"the store {db_uri} is not a sqlite file: it needs no server of ablate's "
                         "(point MLFLOW_TRACKING_URI at its server)")
    artifacts = (path.resolve().parent / "mlartifacts").as_uri()
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", db_uri,
            "--default-artifact-root", artifacts, "--no-serve-artifacts",
            "--host", host, "--port", str(port), "--workers", str(workers)]


# MLflow's server also runs a job queue (for its own GenAI jobs), a dozen processes that
# ablate does not use.
ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path


def start(db_uri, host="127.0.0.1", port=None, wait_s=120):
    """A server over `db_uri` in its own process group, answering on /health; its output goes
    to mlflow-server.log beside the database. RuntimeError (with that log's end) when it does
    not come up within `wait_s`."""
    port = port or free_port(host)
    log = sqlite_path(db_uri).resolve().parent / "mlflow-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(command(db_uri, host, port), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **ENV})
    server = Server(proc, f"http://{host}:{port}", log)
    atexit.register(stop, server)  # its own session outlives this process otherwise (Ctrl-C, an error)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as r:
                if r.status == 200:
                    return server
        time.sleep(0.5)
    stop(server)
    tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-10:])
    raise RuntimeError(f"the MLflow server over {db_uri} did not answer on {server.url} within "
                       f"{wait_s} s (log {log}):\n{tail}")


def stop(server):
    """End the server's process group: SIGTERM, then SIGKILL after 10 s."""
    if server is None or server.proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.proc.pid, sig)
        try:
            server.proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def main(argv=None):
    p = argparse.ArgumentParser(prog="ablate server", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="the interface to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--store", default=None, help="a sqlite:/// store (default: the project's, or MLFLOW_TRACKING_URI)")
    args = p.parse_args(argv)
    db = args.store or tracking_uri()
    try:
        cmd = command(db, args.host, args.port)
    except ValueError as e:
        print(f"ablate server: {e}", file=sys.stderr)
        return 1
    print(f"MLflow server over {db}: jobs log through it with "
          f"MLFLOW_TRACKING_URI=http://{socket.getfqdn() if args.host == '0.0.0.0' else args.host}:{args.port}",
          file=sys.stderr)
    return subprocess.call(cmd, env={**os.environ, **ENV})


def ui(argv=None):
    """MLflow's UI on the store (`mlflow ui`, any of its options after `ablate ui`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    uri = tracking_uri()
    if uri.startswith(("http://", "https://")):
        print(f"ablate ui: the store is a server: open {uri}", file=sys.stderr)
        return 0
    return subprocess.call([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, *argv])


if __name__ == "__main__":
    sys.exit(main())
