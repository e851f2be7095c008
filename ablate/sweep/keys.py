"""What a rerun finds a sweep's jobs by (ablate/sweep/resume.py): each job run's tag `job_key`,
a hash of the job's own overrides. Apart from resume.py so that tracking.py, which tags each
job, and resume.py, which logs through tracking.py, do not import each other."""
import hashlib

from omegaconf import OmegaConf


def job_key(overrides) -> str:
    """The key of one job: a hash of its overrides, in any order."""
    return hashlib.sha256("\n".join(sorted(map(str, overrides))).encode()).hexdigest()[:16]


def job_key_of(cfg):
    """The key of the job whose composed config is `cfg`: its `hydra.overrides.task`, from the
    config where it has the hydra node (the launching process's copy of a job), else from
    Hydra's (inside the job); None outside a multirun job."""
    overrides = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return None
        overrides = HydraConfig.get().overrides.task
    return job_key(list(overrides))


def job_tags(cfg) -> dict:
    """The tag a sweep's job run carries so that a rerun finds it: {'job_key': ...}."""
    key = job_key_of(cfg)
    return {"job_key": key} if key else {}
