"""What a job found: one structure from the first stage to the store.

`status` is one of STATUSES; `params` identify and describe (strings), `metrics` measure
(numbers), `artifacts` are texts kept beside the run (logs, JSON), `error` says what went
wrong. A stage adds to the result it is handed (`add`); a process of the GPU half sends its
own as JSON (`to_dict`, `from_dict`).
"""
from dataclasses import asdict, dataclass, field

STATUSES = ("ok", "build_failed", "crashed", "timeout", "incorrect", "static", "not_applicable",
            "not_run")  # not_run: its task ended before it (ablate/sweep/resume.py); a rerun runs it
# Jobs whose measurement stands, or that had nothing to measure: a generic pathology that does
# not apply to the kernel (`error` says why); every other status makes the MLflow run FAILED
# (red in the UI).
GOOD_STATUSES = ("ok", "static", "not_applicable")


@dataclass
class Result:
    status: str
    params: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    artifacts: dict = field(default_factory=dict)
    error: str | None = None

    def add(self, params=None, metrics=None, artifacts=None, keep=True) -> "Result":
        """Add entries from an earlier stage (`keep`: this result's own win where both name
        one) or from a later one (`keep=False`: theirs win). Returns self."""
        for mine, theirs in ((self.params, params), (self.metrics, metrics), (self.artifacts, artifacts)):
            for key, value in (theirs or {}).items():
                if not keep or key not in mine:
                    mine[key] = value
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        return cls(status=d["status"], params=dict(d.get("params") or {}), metrics=dict(d.get("metrics") or {}),
                   artifacts=dict(d.get("artifacts") or {}), error=d.get("error"))
