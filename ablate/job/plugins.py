"""Kernel plugins: where ablate finds a kernel, and how Hydra sees that kernel's configs.

A plugin is a folder named after its kernel, the product's layout in small:

    <name>/
      spec.py                  what the kernel computes (the only place that knows): shape
                               fields, tensors with their roles, reference and tolerance, the
                               work model, the peers timed beside it (SPEC below; a thin spec
                               leaves out what ablate/job/thin.py derives, the C ABI included)
      base/                    the base's sources (spec.SOURCE names the translation unit;
                               the plugin folder is the include root)
      patches/                 one header per pathology
      conf/kernel/<name>.yaml  its Hydra choice: name, MLflow experiment, default shape
      conf/pathology/*.yaml    its pathologies (`none`, the base, is ablate's own)
      conf/shape/*.yaml        its shapes

Plugins are looked up in this project's kernels/, then in the folders of ABLATE_KERNEL_PATH
(separated by os.pathsep; one that is not a folder is passed over, as PATH does), then in
`kernel_path=[...]` (the app's override, the tools' --kernel-path): there `~` and paths
relative to the working directory are taken as a shell would take them, made absolute before
Hydra reads the command line (Hydra's own parser refuses a `~`), and one that is not a folder
is a one-line error. A run is about one kernel:
`kernel=NAME` picks it (conf/config.yaml names the default), and `choose` points
ABLATE_KERNEL_CONF at its conf/ before Hydra starts, where the search-path plugin in
hydra_plugins/ablate_kernel adds it to Hydra's config search path. `pathology=glob(*)` and
`shape=glob(*)` therefore see that kernel's configs and no other's, and a pathology is never
built against another kernel's base.
"""
import functools
import hashlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ablate.job import thin
from ablate.paths import CONF, KERNELS

GENERIC = CONF / "generic"  # the generic pathologies every kernel gets (conf/generic/pathology/)
GENERIC_TRITON = CONF / "generic_triton"  # a Triton kernel's instead (conf/generic_triton/pathology/)
GENERIC_CUTE = CONF / "generic_cute"  # a CuTe DSL kernel's (conf/generic_cute/pathology/)
PATH_ENV = "ABLATE_KERNEL_PATH"
CONF_ENV = "ABLATE_KERNEL_CONF"  # read by hydra_plugins/ablate_kernel
GENERIC_ENV = "ABLATE_KERNEL_GENERIC"  # the chosen kernel's generic pathologies' folder, read there too
TUNABLES_ENV = "ABLATE_KERNEL_TUNABLES"  # the chosen kernel's generated neighbours (ablate/job/tunables.py)

# What the pipeline reads of a spec, and what each is for. A thin spec (ablate/job/thin.py)
# leaves out what its declarations say: the ABI from the prototype, the tensors' roles,
# shapes and dtypes from TENSORS, the shape's fields from SHAPE, the work model as formulas.
SPEC = {
    "SOURCE": "the base's translation unit, relative to the plugin folder",
    "SYMBOL": "the C function of the built library that runs the kernel",
    "ARGTYPES": "that function's ctypes argument types (default: read from its extern \"C\" "
                "prototype in the plugin's sources)",
    "OUTPUTS": "names of the tensors (in make_inputs' dict) that the kernel writes (default: "
               "TENSORS' out and inout)",
    "BOUND": "'memory' or 'compute' (default from WORK): which of the GPU's measured ceilings "
             "its speed is held to",
    "WORK": f"its kind of work, one of {list(thin.WORKS)}: the ceiling its speed is held to "
            "(default from BOUND: compute is fp16_tensor)",
    "SANITIZE_SHAPES": "small shapes (dicts) that compute-sanitizer runs every variant on",
    "validate_shape": "shape(shape config) -> the shape as a plain dict; ValueError naming the "
                      "problem (default: from SHAPE = {field: int | float | bool | choices | range | function})",
    "make_inputs": "make_inputs(shape, generator, device) -> {name: tensor}, inputs and outputs "
                   "(default: from TENSORS = {name: (role, shape, dtype[, init])})",
    "arguments": "arguments(pointers, shape, stream) -> the C function's arguments (default: by "
                 "the prototype's parameter names: tensors, shape fields, PARAMS formulas, the stream)",
    "reference": "reference(inputs, shape) -> {output name: float32/float64 tensor} (a lone "
                 "tensor when there is one output); inout tensors hold their original contents",
    "tolerance": "tolerance(shape) -> the correctness gate's bound on the error (or TOLERANCE)",
    "flops": "flops(shape) -> floating-point operations of one launch (or the formula FLOPS; "
             "0 by default for WORK memory)",
    "bytes_moved": "bytes_moved(shape) -> the fewest global-memory bytes one launch moves (or the "
                   "formula BYTES; default from TENSORS: in read once, out written once, inout both)",
}
# And what it may define; the pipeline has a default for each.
OPTIONAL = {
    "CONFIGS": "[{name, threads, smem_bytes}]: the kernel's launch configs, for a library that does not "
               "export ablate_variant_info (a plain kernel; default: the library's own)",
    "ARCH": "the arch the kernel must be built for (e.g. sm_90a, for wgmma or setmaxnreg); on a "
            "GPU of another chip it is unavailable (default: build.arch, auto = the GPU's)",
    "INCLUDE_DIRS": "folders (or a function returning them) added to every build's include path, "
                    "after the plugin's folder and ablate's: a header library's, e.g. found in an "
                    "installed Python package (default: none)",
    "FLAGS": "nvcc flags every build of the kernel takes, after build.flags (default: none)",
    "HEADER": "the file (relative to the plugin folder) holding SYMBOL's prototype (default: "
              "the first of the plugin's sources that declares it, headers first)",
    "PARAMS": "{C parameter name: formula of the shape}: a scalar parameter's value when it is "
              "not the shape field of its name (or a pointer's tensor when not its name)",
    "INOUTS": "names among OUTPUTS that the kernel also reads (default: TENSORS' inout, else none)",
    "SHAPE_DEFAULTS": "{field of SHAPE: value}: what a shape that leaves the field out means (default: "
                      "every field required)",
    "not_applicable": "not_applicable(pathology, shape[, candidate]) -> why the pathology does not apply at this "
                      "shape (its job is not_applicable with that reason, nothing built), or None "
                      "(default: every pathology applies at every shape)",
    "base_meta": "base_meta(shape) -> a Triton kernel's base META at this shape (a configuration chosen by "
                 "shape; default: META at every shape)",
    "CANDIDATES": "{name: configuration}: the configurations the base is the fastest of at a shape, timed on the "
                  "GPU (a CUDA kernel's FORCE_MACRO value or {macro: value}, a Triton kernel's META overrides; "
                  "default: none)",
    "FORCE_MACRO": "the macro a CUDA kernel's build is given a candidate's value in (CANDIDATES)",
    "DEFAULT_CANDIDATE": "the candidate the base runs where nothing is timed (static mode): a name, or "
                         "a function of the shape (default: the first)",
    "candidates": "candidates(shape) -> the candidates worth timing at this shape (default: all)",
    "label": "label(shape) -> a readable one-line description of a shape",
    "PEERS": "{name: make(shape) -> run(inputs)}: other implementations timed beside it",
    "DEFAULT_PEERS": "the peers a job times when bench.peers is null (default: all)",
    "error": "error(output, reference) -> the gate's error (default: ||o - ref|| / ||ref||)",
    "config_of": "config_of(kernel name, configs) -> the variant-info config a compiled "
                 "kernel instance belongs to (default: the only one)",
    "launched": "launched(kernel name, shape, configs) -> whether a shape runs that instance "
                "(default: true when the library has one config)",
}
# A Triton kernel's spec (ablate/build/triton_aot.py) has no C ABI: it names its function and
# its launch instead, and SOURCE and SYMBOL are derived (its file, its name).
TRITON_SPEC = {
    "TRITON": "the @triton.jit function (bare, or under @triton.autotune / @triton.heuristics): FILE.py:NAME "
              "relative to the plugin folder, or package.module:NAME of an installed package",
    "META": "the base's constexprs and compile options (num_warps, num_stages, ...); an autotuned "
            "function's may be left out (its autotuner's pick on a GPU, its first config without)",
    "INSTANCES": "{name: shape}: the compiled instances, one per specialization the shapes need",
    "grid": "grid(shape, meta) -> the launch grid",
    "args": "args(inputs, shape) -> {parameter: value}: the function's non-constexpr arguments (default: "
            "by name: the tensor, the shape field, PARAMS[name])",
}
# A CuTe DSL kernel's spec (ablate/build/cute_aot.py) names its function and its instances.
CUTE_SPEC = {
    "CUTE": "the @cute.jit function, or a library's compile function (one that calls cute.compile and returns "
            "what it compiled): FILE.py:NAME relative to the plugin folder, or package.module:NAME",
    "META": "the base's compile-time parameters (cutlass.Constexpr arguments, a library's configuration fields)",
    "INSTANCES": "{name: shape}: the compiled instances, one per STATIC fields' values and dtypes the shapes need",
    "call_args": "call_args(inputs, shape) -> tuple: the compiled function's arguments (default: a @cute.jit "
                 "function's non-META parameters but the stream, by name)",
}
CUDA_ONLY = ("ARGTYPES", "arguments")
BOUNDS = thin.BOUNDS
# A plugin's files that its provenance hash covers (Plugin.sources): sources and headers (those
# ablate.build.compile hashes into a library), Python, yamls.
SOURCE_SUFFIXES = {".h", ".hh", ".hpp", ".cuh", ".cu", ".inc", ".c", ".cc", ".cpp", ".py", ".yaml", ".yml"}


class PluginError(ValueError):
    """A kernel that cannot be used: unknown, or its folder is missing a piece (named)."""


@dataclass(frozen=True)
class Plugin:
    name: str
    dir: Path
    spec: thin.Spec  # the spec module with the defaults it leaves out

    @property
    def conf(self) -> Path:
        return self.dir / "conf"

    @property
    def language(self) -> str:
        """cuda (a source nvcc builds), triton (a @triton.jit function: spec.TRITON) or cute (a
        CuTe DSL function: spec.CUTE)."""
        return self.spec.LANGUAGE

    @property
    def generic(self) -> Path:
        """The folder of the generic pathologies this kernel gets (its language's)."""
        return {"triton": GENERIC_TRITON, "cute": GENERIC_CUTE}.get(self.language, GENERIC)

    @property
    def tunables(self) -> Path:
        """The conf folder of its tunables' neighbours, generated from its spec (`tune_*`:
        ablate/job/tunables.py), once per process and again where it went missing;
        PluginError naming what is wrong with its TUNABLES."""
        from ablate.job import tunables

        folder = self.__dict__.get("_tunables")  # a frozen dataclass: its own cache, by hand
        if folder is None or not folder.is_dir():
            try:
                folder = self.__dict__["_tunables"] = tunables.write(self)
            except tunables.TunableError as e:
                raise PluginError(str(e)) from None
        return folder

    @property
    def source(self) -> Path:
        return self.dir / self.spec.SOURCE

    def label(self, shape: dict) -> str:
        """A shape in words: the spec's label, else its fields."""
        if hasattr(self.spec, "label"):
            return self.spec.label(shape)
        return " ".join(f"{k}={v}" for k, v in shape.items())

    def sources(self) -> list[Path]:
        """What of the folder makes the kernel what it is: every file that goes into its build
        (the source and every header beside it, as ablate.build.compile hashes them), its
        Python (spec.py and whatever it imports beside it) and its yamls (conf/, links
        followed); caches, hidden files and anything else left out."""
        out = []
        for top, dirs, files in os.walk(self.dir, followlinks=True):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            out += [Path(top) / f for f in files if not f.startswith(".") and Path(f).suffix in SOURCE_SUFFIXES]
        return sorted(out, key=lambda p: p.relative_to(self.dir).as_posix())

    def sources_digest(self) -> str:
        """16 hex digits of a hash of `sources()` (names relative to the folder, and contents):
        two jobs of one digest ran the same plugin code, wherever its folder lay."""
        h = hashlib.sha256()
        for path in self.sources():
            h.update(path.relative_to(self.dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        for key, value in sorted(self.package().items()):  # a library's kernel: its version and source
            h.update(f"{key}={value}".encode() + b"\0")
        return h.hexdigest()[:16]

    def package(self) -> dict:
        """A Triton or CuTe DSL kernel named by module path (TRITON or CUTE =
        "package.module:function"): the installed package's name and version and a hash of the
        function's source (triton_target.package) or of its package's files (cute_aot.package);
        {} for a kernel whose code is the folder's own."""
        if self.language == "cute":
            from ablate.build import cute_aot

            return cute_aot.package(self.spec.CUTE)
        if self.language != "triton":
            return {}
        from ablate.build import triton_target

        return triton_target.package(self.spec.TRITON)

    def options(self, group: str) -> list[str]:
        """The kernel's configs in `group` (pathology, shape), with ablate's own (the base,
        and the generic pathologies of conf/generic/ that every kernel gets)."""
        names = {p.stem for d in (self.conf / group, CONF / group, self.generic / group, self.tunables / group)
                 for p in d.glob("*.yaml")}
        return sorted(names)

    def config_file(self, group: str, name: str) -> Path:
        """The yaml Hydra composes for `group=name`: ablate's conf/ first, then the kernel's,
        then conf/generic/ (hydra_plugins/ablate_kernel's search path: a kernel's own yaml of
        a generic pathology's name overrides it)."""
        for d in (CONF / group, self.conf / group, self.generic / group, self.tunables / group):
            if (d / f"{name}.yaml").is_file():
                return d / f"{name}.yaml"
        raise PluginError(f"kernel {self.name!r} has no {group} {name!r}")


def search_dirs(kernel_path=()) -> list[Path]:
    env = [p for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p]
    return [KERNELS, *(Path(p).expanduser().absolute() for p in [*env, *kernel_path])]


def kernel_dirs(values, given_as="kernel_path") -> list[str]:
    """The folders of a kernel path as the user wrote them (`~`, relative to the working
    directory), absolute; PluginError naming the first that is not a folder."""
    out = []
    for value in values:
        text = str(value).strip()
        if not text:
            continue
        path = Path(os.path.normpath(Path(text).expanduser().absolute()))
        if not path.is_dir():
            raise PluginError(f"{given_as}: {text!r} is not a folder ({path} "
                              f"{'is a file' if path.exists() else 'does not exist'})")
        out.append(str(path))
    return out


# `kernel_path=...` on the app's command line (also with Hydra's + or ++ prefixes).
_KERNEL_PATH_ARG = re.compile(r"^(\+{0,2})kernel_path=(.*)$", re.S)


def split_path_value(value: str) -> list[str]:
    """The folders of `kernel_path=VALUE` as written: `[a,b]`, `a`, `a,b`, quoted or not."""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    return [item[1:-1] if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"" else item
            for item in items]


def hydra_list(dirs) -> str:
    """A list of folders as Hydra's override grammar reads it: each one quoted."""
    return "[" + ",".join("'" + d.replace("'", "\\'") + "'" for d in dirs) + "]"


def add_kernel_arguments(parser) -> None:
    """--kernel and --kernel-path, as the tools (ablate benchmark | sanitize) take them; read
    back with tool_kernel."""
    parser.add_argument("--kernel", default=None, help="the kernel plugin (default: conf/config.yaml's)")
    parser.add_argument("--kernel-path", action="append", default=[], metavar="DIR",
                        help="a folder of kernel plugins besides kernels/ (repeatable; ~ and relative paths "
                             "as in a shell), as the app's kernel_path=[DIR,...]")


def with_kernel_path(argv) -> list[str]:
    """The app's command line with each `kernel_path=...` made absolute and quoted, so that
    `kernel_path=[~/kernels]` and `kernel_path=[../mine]` work as printed (Hydra's parser
    refuses `~`, and a relative path would be read against whatever directory a job runs in);
    PluginError naming a folder that does not exist."""
    out = []
    for arg in argv:
        m = _KERNEL_PATH_ARG.match(arg)
        if m:
            arg = f"{m.group(1)}kernel_path={hydra_list(kernel_dirs(split_path_value(m.group(2))))}"
        out.append(arg)
    return out


def tool_kernel(kernel, kernel_path=(), overrides=()):
    """A tool's --kernel, --kernel-path (repeatable; each may hold several folders separated
    by os.pathsep) and --override arguments, where a `kernel_path=[...]` override counts as
    --kernel-path: (the plugin, its kernel path, the other overrides); PluginError."""
    dirs, rest = [], []
    for value in kernel_path or ():
        dirs += kernel_dirs(str(value).split(os.pathsep), "--kernel-path")
    for o in overrides or ():
        m = _KERNEL_PATH_ARG.match(o)
        if m:
            dirs += kernel_dirs(split_path_value(m.group(2)))
        else:
            rest.append(o)
    return load(kernel or default_kernel(), dirs), dirs, rest


def available(kernel_path=()) -> dict[str, Path]:
    """{name: folder} of every plugin on the search dirs: a folder holding spec.py or conf/kernel."""
    found: dict[str, Path] = {}
    for d in search_dirs(kernel_path):
        if not d.is_dir():
            continue
        for folder in sorted(p for p in d.iterdir() if p.is_dir()):
            if not ((folder / "spec.py").exists() or (folder / "conf" / "kernel").is_dir()):
                continue
            folder = folder.resolve()
            if found.get(folder.name, folder) != folder:
                raise PluginError(f"kernel {folder.name!r} is defined twice: {found[folder.name]} "
                                  f"and {folder}; rename one, or take its folder off the kernel path")
            found[folder.name] = folder
    return found


def load(name: str, kernel_path=()) -> Plugin:
    """The plugin called `name`, checked; PluginError naming what is missing."""
    plugins = available(kernel_path)
    if name not in plugins:
        where = ", ".join(str(d) for d in search_dirs(kernel_path))
        listed = "\n".join(f"\t{n}\t({p})" for n, p in sorted(plugins.items()))
        raise PluginError(f"unknown kernel {name!r} (looked in {where}; more folders: "
                          f"{PATH_ENV} or kernel_path=[...])\nAvailable options in 'kernel':\n{listed}")
    return load_dir(plugins[name])


@functools.cache
def load_dir(folder) -> Plugin:
    """The plugin in `folder`, checked: its spec imports and defines SPEC, its files exist."""
    folder = Path(folder).resolve()
    name = folder.name
    missing = [f"{what} ({folder / what})" for what in
               ("spec.py", f"conf/kernel/{name}.yaml", "conf/shape") if not (folder / what).exists()]
    if missing:
        raise PluginError(f"kernel {name!r} at {folder} is missing {', '.join(missing)}")
    try:
        spec = thin.Spec(_import_spec(name, folder / "spec.py"), name, folder)
    except thin.SpecError as e:
        raise PluginError(f"kernel {name!r}: {folder / 'spec.py'}: {e}") from None
    own = {"triton": TRITON_SPEC, "cute": CUTE_SPEC}.get(spec.LANGUAGE)
    required = {**{k: v for k, v in SPEC.items() if k not in CUDA_ONLY}, **own} if own else SPEC
    absent = [f"{key} ({what})" for key, what in required.items() if not hasattr(spec, key)]
    if absent:
        raise PluginError(f"kernel {name!r}: {folder / 'spec.py'} does not define: " + "; ".join(absent))
    plugin = Plugin(name, folder, spec)
    if not plugin.source.is_file():
        raise PluginError(f"kernel {name!r}: spec.SOURCE {spec.SOURCE!r} is not a file in {folder}")
    if not plugin.options("shape"):
        raise PluginError(f"kernel {name!r} has no shape: add one to {folder / 'conf' / 'shape'}")
    return plugin


def _import_spec(name: str, path: Path) -> ModuleType:
    module_name = f"ablate_kernel_{name}"
    module = sys.modules.get(module_name)
    if module is not None and Path(module.__file__).resolve() == path:
        return module
    loader = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise PluginError(f"kernel {name!r}: {path} failed to import: {type(e).__name__}: {e}") from None
    return module


def of(cfg) -> Plugin:
    """The plugin of a composed config (cfg.kernel.name, cfg.kernel_path)."""
    return load(str(cfg.kernel.name), list(cfg.get("kernel_path") or []))


def use(plugin: Plugin) -> Plugin:
    """Show Hydra this kernel's configs (for every composition from now on, in this process
    and the processes it starts)."""
    os.environ[CONF_ENV] = str(plugin.conf)
    os.environ[GENERIC_ENV] = str(plugin.generic)
    os.environ[TUNABLES_ENV] = str(plugin.tunables)
    return plugin


def choose(argv) -> Plugin:
    """The app's command line -> its kernel, shown to Hydra; PluginError when the kernel is
    unknown or swept, or when a pathology or shape named belongs to another kernel."""
    overrides = _overrides(argv)
    values = {}
    for o in overrides:
        key = o.get_key_element()
        if key in ("kernel", "kernel_path"):
            if o.is_sweep_override():
                raise PluginError(f"{o.input_line}: one kernel per run; sweep each kernel in a "
                                  "run of its own")
            values[key] = o.value()
    kernel_path = values.get("kernel_path") or []
    if isinstance(kernel_path, str):
        kernel_path = [kernel_path]
    plugin = load(str(values.get("kernel") or default_kernel()), kernel_path)
    for o in overrides:
        group = o.get_key_element()
        if group in ("pathology", "shape"):
            _check_belongs(plugin, group, _named(o), kernel_path)
    return use(plugin)


def default_kernel() -> str:
    """The kernel of a run that names none: the `kernel` entry of conf/config.yaml's defaults."""
    from omegaconf import OmegaConf

    for entry in OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml")).get("defaults", []):
        if isinstance(entry, dict) and "kernel" in entry:
            return str(entry["kernel"])
    raise PluginError(f"{CONF / 'config.yaml'} names no default kernel (a `- kernel: NAME` default)")


def compose(kernel=None, overrides=(), kernel_path=(), **kwargs):
    """The app's config for `kernel` (default: the default kernel) with `overrides` (Hydra's
    compose API), for the tools and tests that compose without the app."""
    from hydra import compose as hydra_compose, initialize_config_dir

    kernel = kernel or default_kernel()
    use(load(kernel, kernel_path))
    extra = [f"kernel_path={hydra_list([str(p) for p in kernel_path])}"] if kernel_path else []
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return hydra_compose("config", overrides=[f"kernel={kernel}", *extra, *overrides], **kwargs)


def _overrides(argv):
    """Hydra's own reading of a command line: its argument parser, then its override parser."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args, _ = get_args_parser().parse_known_args(list(argv))
    return OverridesParser.create().parse_overrides(args.overrides or [])


def _named(override) -> list[str]:
    """The option names an override selects by name (none for glob and range sweeps)."""
    from hydra.core.override_parser.types import ChoiceSweep

    value = override.value()
    if isinstance(value, ChoiceSweep):
        value = value.list
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for item in value for v in (item if isinstance(item, list) else [item])
                if isinstance(v, str)]
    return []


def _check_belongs(plugin: Plugin, group: str, names, kernel_path) -> None:
    own = plugin.options(group)
    for name in names:
        if name in own:
            continue
        others = {}
        for other, folder in available(kernel_path).items():
            if other != plugin.name and (folder / "conf" / group / f"{name}.yaml").exists():
                others[other] = folder
        if others:
            owner = ", ".join(f"{k!r} ({v})" for k, v in others.items())
            raise PluginError(f"{group} {name!r} belongs to kernel {owner}, not to {plugin.name!r}, "
                              f"the kernel of this run (kernel={plugin.name}); {plugin.name}'s "
                              f"{group} options: {', '.join(own)}")
