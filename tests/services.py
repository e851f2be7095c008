"""Real services for the scale-out tests, each started in a temporary folder of its own and
torn down after: a one-node SLURM cluster (Debian's munge, slurmctld and slurmd, as root), a
PostgreSQL server (initdb, pg_ctl) and `mlflow server` over it. Every port is a free one on
127.0.0.1; every wait for readiness is bounded, and a service that does not come up fails
with the end of its log.

`require()` skips a test where the programs are missing, except under CI (CI=true), where
it fails: .ci/run installs them (apt-get), so a missing one there is a defect, not a skip.

The cluster has no accounting database (slurmdbd and MySQL): `sacct`, which submitit polls
for the state of a job that left no result (a cancelled one), is a script over the
controller's own view of the same jobs (`scontrol show job`, kept for MinJobAge after they
end), on the tests' PATH only.
"""
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLURM = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel")
POSTGRES = ("initdb", "pg_ctl")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def which(name):
    """`name` on the PATH, or in Debian's PostgreSQL folder (/usr/lib/postgresql/<v>/bin)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found:
        return found
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return hits[-1] if hits else None


def require(*programs, root=False, modules=()):
    """Skip (fail under CI=true) unless every program and python module is there, and this
    process is root where `root`."""
    missing = [p for p in programs if which(p) is None]
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            missing.append(f"python module {m}")
    why = None
    if missing:
        why = f"missing: {', '.join(missing)} (.ci/run installs them with apt-get and pip)"
    elif root and os.geteuid() != 0:
        why = "a one-node SLURM cluster is started as root"
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run this test: {why}")
        pytest.skip(why)


def wait_for(what, ready, timeout_s, logs=(), proc=None):
    """Poll `ready()` every 0.2 s until true; else (or when `proc` exits first) fail naming
    `what` with the logs' ends."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.2)
    timeout_s = f"{timeout_s} s" if proc is None or proc.poll() is None else f"its start (it exited, {proc.returncode})"
    tails = "\n".join(f"--- {p}:\n" + "\n".join(Path(p).read_text(errors="replace").splitlines()[-15:])
                      for p in logs if Path(p).exists())
    raise RuntimeError(f"{what} not ready within {timeout_s}\n{tails}")


def stop(proc, grace_s=10):
    """End a process this module started (its own session): SIGTERM, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def start(cmd, log, env=None):
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)


SACCT = '''#!{python}
"""sacct for a cluster without accounting: `sacct -o JobID,State,NodeList --parsable2 -j ID ...`
(what submitit asks) from `scontrol show job -o`."""
import subprocess, sys
ids = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "-j"]
print("JobID|State|NodeList")
for jid in ids:
    out = subprocess.run(["scontrol", "show", "job", "-o", jid], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = dict(w.split("=", 1) for w in line.split() if "=" in w)
        task = f.get("ArrayTaskId")
        name = f"{{f['ArrayJobId']}}_{{task}}" if task and "-" not in task and "," not in task else (
            f"{{f['ArrayJobId']}}_[{{task}}]" if task else f["JobId"])
        print(f"{{name}}|{{f.get('JobState', 'UNKNOWN')}}|{{f.get('NodeList', '')}}")
'''


@contextlib.contextmanager
def slurm_cluster(folder):
    """A one-node SLURM cluster in `folder`: yields the environment its commands need
    (SLURM_CONF, and PATH with the sacct script first)."""
    folder = Path(folder)
    for sub in ("munge", "state", "spool", "bin"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = folder / "munge" / "munge.socket"
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=ablatetest",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={sock}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",   # no cgroups in a container
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",         # one CPU a task: the node's CPUs run tasks side by side
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=5",                          # scancel: SIGTERM, then SIGKILL 5 s later
        "MinJobAge=600",                       # ended jobs stay in scontrol's view (the sacct script)
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ""]))
    sacct = folder / "bin" / "sacct"
    sacct.write_text(SACCT.format(python=sys.executable))
    sacct.chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    procs = []
    try:
        procs.append(start([which("munged"), "-F", "-f", f"--key-file={key}", f"--socket={sock}",
                            f"--pid-file={folder / 'munge' / 'munged.pid'}", f"--seed-file={folder / 'munge' / 'seed'}",
                            f"--log-file={folder / 'munge' / 'munged.log'}"], folder / "munged.out", env))
        wait_for("munged", lambda: sock.exists(), 30, [folder / "munge" / "munged.log", folder / "munged.out"],
                 procs[-1])
        procs.append(start([which("slurmctld"), "-D", "-i", "-f", str(conf)], folder / "slurmctld.out", env))
        wait_for("slurmctld", lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True,
                                                     timeout=10).returncode == 0,
                 60, [folder / "slurmctld.log", folder / "slurmctld.out"], procs[-1])
        procs.append(start([which("slurmd"), "-D", "-f", str(conf), "-N", host], folder / "slurmd.out", env))
        wait_for("slurmd", lambda: "idle" in subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                                                             text=True, timeout=10).stdout,
                 60, [folder / "slurmd.log", folder / "slurmd.out", folder / "slurmctld.log"], procs[-1])
        yield env
    finally:
        with contextlib.suppress(Exception):  # no job of the test outlives it
            subprocess.run(["scancel", "--user=root"], env=env, capture_output=True, timeout=10)
        for proc in reversed(procs):
            stop(proc)


@contextlib.contextmanager
def postgres():
    """A PostgreSQL server in a new temporary folder (removed after), on 127.0.0.1 only,
    trusting local connections; yields the URI of its database `mlflow`. As root, it runs as
    the `postgres` user (initdb refuses root), in a folder of $TMPDIR that user can reach."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="ablate-postgres-"))
    as_user = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()
    ctl = [*as_user, which("pg_ctl"), "-D", str(data)]
    started = False
    try:
        init = subprocess.run([*as_user, which("initdb"), "-D", str(data), "-U", "ablate", "--auth=trust", "-E",
                               "UTF8"], capture_output=True, text=True, timeout=120, cwd=folder)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stdout}{init.stderr}")
        proc = subprocess.run([*ctl, "-l", str(folder / "postgres.log"), "-w", "-t", "60", "-o",
                               f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start"],
                              capture_output=True, text=True, timeout=90, cwd=folder)
        started = True
        if proc.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {proc.stdout}{proc.stderr}\n"
                               + (folder / "postgres.log").read_text(errors="replace")[-2000:])
        import psycopg

        with psycopg.connect(f"postgresql://ablate@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE mlflow")
        yield f"postgresql://ablate@127.0.0.1:{port}/mlflow"
    finally:
        if started:
            subprocess.run([*ctl, "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60, cwd=folder)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(folder, backend_uri):
    """`mlflow server` over `backend_uri` on a free port of 127.0.0.1, its artifacts in
    `folder`/artifacts (written by the clients: no proxy); yields its URL."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = folder / "mlflow-server.log"
    proc = start([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
                  "--default-artifact-root", (folder / "artifacts").as_uri(), "--no-serve-artifacts",
                  "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], log,
                 {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    url = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        def ready():
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                return r.status == 200
        wait_for("mlflow server", ready, 180, [log], proc)
        yield url
    finally:
        stop(proc)
