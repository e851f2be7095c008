"""matmul_triton's kernel in Triton's interpreter: the worker of
tests/test_matmul_triton_splitk.py, run as `TRITON_INTERPRET=1 python tests/matmul_splitk_interpreted.py
CASES` (the variable must be set before triton is imported: @triton.jit reads it as it decorates,
triton.language's own functions too). The plugin loader takes only compiled @triton.jit functions,
so the spec and the kernel are imported here by path, the inputs made from the spec's TENSORS and
the scalars from its PARAMS, as ablate.job.thin makes them. Prints one line of JSON: {"skip": why}
or {"runs": [[[relative error, counters' sum, workspace written], twice], ...]}."""
import json
import sys
from pathlib import Path

from ablate.build.triton_aot import OPTIONS, with_descriptors
from ablate.build.triton_target import module_of
from ablate.job import thin

PLUGIN = Path(__file__).resolve().parents[1] / "kernels" / "matmul_triton"


def interpreter_fix():
    """Triton 3.6's interpreter turns a scalar's one-element array into an index with int(), which
    numpy 2.4 refuses for arrays of one dimension (a loop bounded by a runtime value fails):
    patched to take the element. None when that holds or is not needed; else why the interpreter
    cannot run the kernel."""
    import numpy as np
    import triton.runtime.interpreter as interp

    try:
        int(np.zeros(1))
        return None
    except TypeError:
        pass
    if not hasattr(interp, "_patch_lang_tensor"):
        return "this Triton's interpreter indexes with int() of a 1-d array, which this numpy refuses"
    original = interp._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    interp._patch_lang_tensor = patched
    return None


def run(cases):
    import torch
    import triton

    if not triton.knobs.runtime.interpret:
        return {"skip": "TRITON_INTERPRET is not set"}
    why = interpreter_fix()
    if why:
        return {"skip": why}
    spec, _ = module_of(PLUGIN, "file", "spec.py", "interpreted")
    file, name = spec.TRITON.split(":")
    kernel = getattr(module_of(PLUGIN, "file", file, "interpreted")[0], name)
    tensors = thin.tensors_of(spec.TENSORS)
    out = []
    for m, n, k, dtype, candidate, tma, ws, *more in cases:
        shape = {"m": m, "n": n, "k": k, "dtype": dtype}
        # no dependent launch: the interpreter has no griddepcontrol, and runs one launch at a time;
        # `more`: META overrides (NUM_SMS: a persistent grid of a few programs)
        meta = {**spec.base_meta_of(candidate), "USE_TMA": tma, "USE_GDC": False, **(more[0] if more else {})}
        gen = torch.Generator().manual_seed(0)
        inputs = {t: decl.make(shape, gen, "cpu") for t, decl in tensors.items()}
        scalars = {p: thin.formula(f, shape) for p, f in spec.PARAMS.items()}
        if ws is not None:
            scalars["WS_SIZE"] = ws
        ref = spec.reference(inputs, shape)
        runs = []
        for _ in range(2):
            inputs["c"].fill_(float("nan"))
            kernel[spec.grid(shape, meta)](**with_descriptors(spec, inputs, meta), **scalars,
                                           **{p: v for p, v in meta.items() if p not in OPTIONS})  # constexprs only
            err = ((inputs["c"].float() - ref).norm() / ref.norm()).item()
            runs.append([err, int(inputs["locks"].abs().sum()), bool(inputs["ws"].abs().sum() > 0)])
        out.append(runs)
    return {"runs": out}


if __name__ == "__main__":
    print(json.dumps(run([tuple(c) for c in json.loads(sys.argv[1])])))
