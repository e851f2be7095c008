"""Hydra search-path plugin: the chosen kernel's own configs join Hydra's config search path.

ablate/plugins.py resolves `kernel=NAME` to its plugin folder before Hydra starts and sets
ABLATE_KERNEL_CONF to that folder's conf/ (its kernel/, pathology/ and shape/ groups). A
search-path plugin, not `hydra.searchpath`, because Hydra's glob() sweeps list a group's
options from the search path that plugins build, not from `hydra.searchpath`.
"""
import os

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

ENV = "ABLATE_KERNEL_CONF"


class AblateKernelSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        conf = os.environ.get(ENV)
        if conf:
            search_path.append(provider="ablate-kernel", path=f"file://{conf}")
