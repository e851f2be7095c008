"""The sweep's progress line: jobs done of the total, how many ok and how many failed, time
elapsed and time left (tqdm's), drawn by the process that launched the sweep; nothing when
its stdout is not a terminal (a log file, CI).

Jobs may run in other processes (a parallel launcher) or on other machines (SLURM), and the
launching process hears of none of them until the last has ended. So each job leaves a small
file in its own output folder (`mark`: its status and its one-line summary), and a thread of
the launching process counts those files (`Progress`). When the jobs run in this process
(Hydra's basic launcher; joblib's with one job at a time) their log lines are written above
the line (stdout is wrapped); when they run in other processes, their console logging is
left to their log files and the line prints each job's summary as it lands.
"""
import io
import json
import logging
import os
import sys
import threading
from pathlib import Path

MARK = "ablate_job.json"
GOOD = ("ok", "static")
QUIET_ENV = "ABLATE_PROGRESS_PID"  # set while a line is drawn: the pid of the process drawing it


def mark(output_dir, status, summary="", **fields):
    """Record a job's end in its output folder (where the line's thread finds it); `fields`:
    what else the launching process reads there (ablate/sweep/outcome.py), and `gpu`: the
    index of the GPU that timed it (the line shows each GPU's share)."""
    path = Path(output_dir) / MARK
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"status": str(status), "summary": summary, "pid": os.getpid(), **fields}))
    tmp.replace(path)  # whole or absent, never half written


def quiet_console_in_other_processes():
    """In a job that runs in another process than the one drawing the line, drop the console
    handlers of the root logger (Hydra's job logging sets them up for each job): the job's log
    file keeps every line, the line shows its summary."""
    pid = os.environ.get(QUIET_ENV)
    if not pid or int(pid) == os.getpid():
        return
    root = logging.getLogger()
    for h in list(root.handlers):
        if type(h) is logging.StreamHandler and getattr(h.stream, "name", "") in ("<stdout>", "<stderr>"):
            root.removeHandler(h)


class Progress:
    """The line for a sweep of `total` jobs whose output folders lie under `sweep_dir`."""

    def __init__(self, sweep_dir, total, enabled=None, poll_s=0.5):
        from tqdm import tqdm

        self.sweep_dir, self.total, self.poll_s = Path(sweep_dir), total, poll_s
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.seen, self.counts = set(), {"ok": 0, "failed": 0, "not applicable": 0}
        self.gpus = {}  # GPU index: jobs it timed (the marks that name one)
        self.stdout = sys.stdout
        self.bar = tqdm(total=total, desc="sweep", file=self.stdout, disable=not self.enabled,
                        bar_format="{desc}: {n_fmt}/{total_fmt} jobs{postfix} [{elapsed} elapsed, {remaining} left]")
        self.bar.set_postfix_str(self._counts(), refresh=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ablate-progress", daemon=True)
        if self.enabled:
            os.environ[QUIET_ENV] = str(os.getpid())
            # Whatever this process writes to stdout from now on (its log handlers, which Hydra
            # sets up again for each job, take sys.stdout as it is then) goes above the line.
            sys.stdout = _AboveTheLine(self.stdout)
            self._thread.start()

    def _counts(self):
        na = self.counts["not applicable"]
        shares = ", ".join(f"gpu{g} {n}" for g, n in sorted(self.gpus.items(), key=lambda i: _index_order(i[0])))
        return (f"ok {self.counts['ok']}, failed {self.counts['failed']}" + (f", not applicable {na}" if na else "")
                + (f"; {shares}" if shares else ""))

    def poll(self):
        """Count the marks that appeared since the last call; return how many."""
        new = 0
        for path in sorted(self.sweep_dir.glob(f"**/{MARK}")):
            if path in self.seen:
                continue
            try:
                job = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written: the next poll reads it
            self.seen.add(path)
            status = job.get("status")
            self.counts["ok" if status in GOOD else "not applicable" if status == "not_applicable" else "failed"] += 1
            if job.get("gpu") is not None:
                self.gpus[job["gpu"]] = self.gpus.get(job["gpu"], 0) + 1
            if job.get("pid") != os.getpid() and job.get("summary") and self.enabled:  # else logged here
                self.bar.write(job["summary"], file=self.stdout)
            new += 1
        if new:
            self.bar.set_postfix_str(self._counts(), refresh=False)
            self.bar.update(new)
        return new

    def _run(self):
        while not self._stop.wait(self.poll_s):
            self.poll()

    def close(self):
        """The last count, then the line is left as it stands (with a newline)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.poll()
        self.bar.close()
        if isinstance(sys.stdout, _AboveTheLine):
            sys.stdout = self.stdout
        if os.environ.get(QUIET_ENV) == str(os.getpid()):
            del os.environ[QUIET_ENV]
        return dict(self.counts)


def _index_order(index):
    """GPU indices in number order (gpu2 before gpu10), any other name after them."""
    return (0, int(index), "") if str(index).isdigit() else (1, 0, str(index))


class _AboveTheLine(io.TextIOBase):
    """stdout while the line is drawn: each whole line written goes above it (the line is
    cleared, the text written, the line drawn again)."""

    def __init__(self, stream):
        self.stream, self.pending = stream, ""

    def write(self, text):
        from tqdm import tqdm

        self.pending += text
        if "\n" in self.pending:
            lines, _, self.pending = self.pending.rpartition("\n")
            with tqdm.external_write_mode(file=self.stream):
                self.stream.write(lines + "\n")
                self.stream.flush()
        return len(text)

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return self.stream.isatty()

    @property
    def name(self):
        return getattr(self.stream, "name", "<stdout>")

    def fileno(self):
        return self.stream.fileno()
