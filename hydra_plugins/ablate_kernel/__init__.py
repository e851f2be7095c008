"""Hydra search-path plugin: the chosen kernel's own configs join Hydra's config search path.

ablate/job/plugins.py resolves `kernel=NAME` to its plugin folder before Hydra starts and sets
ABLATE_KERNEL_CONF to that folder's conf/ (its kernel/, pathology/ and shape/ groups), which
joins the search path, followed by ablate's conf/generic/ (the generic pathologies; a Triton
kernel's conf/generic_triton/, which ABLATE_KERNEL_GENERIC names), then the folder of its
tunables' neighbours that ablate generates (ABLATE_KERNEL_TUNABLES: `tune_*`). A
search-path plugin, not `hydra.searchpath`, because Hydra's glob() sweeps list a group's
options from the search path that plugins build, not from `hydra.searchpath`.
"""
import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

ENV = "ABLATE_KERNEL_CONF"
GENERIC_ENV = "ABLATE_KERNEL_GENERIC"  # ablate.job.plugins.GENERIC_ENV
TUNABLES_ENV = "ABLATE_KERNEL_TUNABLES"  # ablate.job.plugins.TUNABLES_ENV
GENERIC = Path(__file__).resolve().parents[2] / "conf" / "generic"  # ablate.paths.CONF / "generic"


def _gpus():
    """`${ablate_gpus:}` (conf/hydra/launcher/gpus.yaml): the GPUs a sweep may use, counted
    on first use. Registered here because Hydra loads this module before every composition,
    the app's and the tools' alike."""
    from ablate.gpu.gpus import count

    return count()


def _root():
    """`${ablate_root:}` (conf/config.yaml's hydra.run.dir and hydra.sweep.dir): the project's
    root, so that Hydra's logs land in its runs/ from whatever directory ablate is run."""
    from ablate.paths import ROOT

    return str(ROOT)


def _kernels():
    """`${ablate_kernels:}` (conf/config.yaml's help): the kernels this run could pick, and
    which one the help shows the groups of."""
    from pathlib import Path

    from ablate.job import plugins

    try:
        names = ", ".join(sorted(plugins.available()))
    except plugins.PluginError as e:
        names = f"(none readable: {e})"
    shown = Path(os.environ[ENV]).parent.name if os.environ.get(ENV) else "the default"
    return f"{names}; the groups below are {shown}'s"


if not OmegaConf.has_resolver("ablate_kernels"):
    OmegaConf.register_new_resolver("ablate_kernels", _kernels)
if not OmegaConf.has_resolver("ablate_gpus"):
    OmegaConf.register_new_resolver("ablate_gpus", _gpus, use_cache=True)
if not OmegaConf.has_resolver("ablate_root"):
    OmegaConf.register_new_resolver("ablate_root", _root)


def _tunables(conf):
    """The generated folder ABLATE_KERNEL_TUNABLES names, written again where this process
    does not see it (a job on another machine, whose temporary directory is its own): the
    same spec gives the same folder."""
    folder = os.environ[TUNABLES_ENV]
    if not Path(folder).is_dir():
        from ablate.job import plugins

        folder = str(plugins.load_dir(Path(conf).parent).tunables)
        os.environ[TUNABLES_ENV] = folder
    return folder


class AblateKernelSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        conf = os.environ.get(ENV)
        if conf:
            search_path.append(provider="ablate-kernel", path=f"file://{conf}")
            # The generic pathologies every kernel gets, after the kernel's own configs: a
            # kernel's conf/pathology/<name>.yaml of a generic pathology's name overrides it.
            # A Triton kernel's are its language's (ABLATE_KERNEL_GENERIC: conf/generic_triton/).
            search_path.append(provider="ablate-generic", path=f"file://{os.environ.get(GENERIC_ENV) or GENERIC}")
            # Its tunables' neighbours, generated from its spec (ablate/job/tunables.py: tune_*).
            if os.environ.get(TUNABLES_ENV):
                search_path.append(provider="ablate-tunables", path=f"file://{_tunables(conf)}")
