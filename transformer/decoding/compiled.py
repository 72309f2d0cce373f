"""Compiled decoding: the model's own decoder step under ``torch.compile``, over a static cache.

``compiled_decoding(model)`` wraps an autoregressive model (``decoding.api.Seq2SeqModel``) so
that greedy and beam search run unchanged on it: ``init_cache`` builds a ``StaticKVCache``
(buffers of fixed shape, the position in a tensor), and ``encode``, ``decode_step``,
``decode_step_logits`` and ``decode_step_states`` are the model's own methods, compiled. Nothing
is rewritten: the compiled graph is traced from the same modules that run eagerly. A search
compiles its own step with them (``search_step``): greedy's decoder step and argmax, beam
search's decoder step, candidates and surviving beams, each one graph per step, so that one
sentence at a time a step is one call rather than a dozen small ones.

Sizes are symbolic (``dynamic=True``, without "duck" shapes): one graph serves every batch,
source length and number of steps so far (the cache shows each step only its filled steps,
``StaticKVCache.limit``), and a graph for a single row or a first step (sizes of 1 are always
specialised); a warm-up over a few batches compiles them, and nothing recompiles after it
(tested). On a CPU, inductor's
``freezing`` makes the weights constants, so every ``nn.Linear`` runs as a oneDNN product on a
weight packed once for it (a single fp32 row keeps MKL's plain product, ``_frozen_settings``),
the step's small element-wise operations are fused, and the code that calls them in order is
C++ (``cpp_wrapper``). What a call costs besides the step itself is the check
that the inputs fit the graph: sizes, dtypes and devices, compiled to C++; the modules are not
re-checked (their weights are constants of the graph).

One sentence at a time that check and the Python around it were still a seventh of a greedy
step, so on a CPU a single sentence's decoder steps (its one row, or its beams) run a program
compiled ahead of time from the same step instead (``torch.export`` and AOTInductor, with the
same settings; ``decoding.exported``), called without dynamo, and so does its encoder, together
with the decoder's cross-attention keys and values (which ``init_cache`` then takes rather than
computing them eagerly): greedy decoding one sentence at a time went from about 22 to 18.6 ms a
sentence on the CPU recipe's checkpoint. Batches keep the ``torch.compile`` graphs, where the
call's cost is shared by the rows (the exported programs with a symbolic row count ran slower
there). A batch whose other sentences have finished goes on with its last one on the program.
Each of these compiles at its first use.

CUDA graphs (``mode="reduce-overhead"``) are not used: they need the row count fixed, while
search drops finished rows from the batch; on a GPU the step is compiled as on a CPU, without
freezing.

On a CPU the graphs are traced from a copy of the model whose linear layers' weights are stored
input-major (``_input_major``: the same values, another memory layout, which MKL multiplies a
few rows by faster). The weights are read when the wrapper is built (on a CPU) or the step first
compiled: a wrapper belongs to one trained model and is not for decoding inside a training loop
(the validation decoding stays eager).
Outputs are the eager model's up to floating-point summation order (tests compare them token
for token with the eager cache on greedy and beam search). A bf16 model (``decode.dtype=bf16``,
``decoding.precision``) compiles the same way; the
fused step rounds its intermediate results differently from eager bf16, so near-ties can go the
other way (tests compare tokens on a model that has learned its task).
"""

from __future__ import annotations

import types
from copy import deepcopy

import torch
from torch import Tensor, nn

from transformer.decoding.api import EncoderOutLike
from transformer.decoding.exported import ExportedEncoder, ExportedStep
from transformer.modules.kv_cache import StaticKVCache


class CompiledDecoding:
    """``model`` with its decoder step compiled over a ``StaticKVCache``; see the module doc.

    Attributes: ``model`` (the wrapped module, unchanged).
    """

    def __init__(self, model: nn.Module, device: torch.device | str = "cpu"):
        self.model = model
        # Built once and entered around every call (each patch is reusable): building them anew
        # cost a step 40-80 microseconds on a CPU, a few percent of a batch-1 step.
        self._cpu = torch.device(device).type == "cpu"
        first = next(model.parameters(), None)
        self._fp32 = first is None or first.dtype == torch.float32
        # Batches (torch.compile's graphs, their rows symbolic) have several rows.
        self._frozen = torch._inductor.config.patch(_frozen_settings(self._cpu))
        self._dynamo = _dynamo_settings()
        # What the graphs are traced from: input-major weights serve a single fp32 row's plain
        # product; a bf16 model's products all run on packed weights (``_input_major``).
        self._traced = _input_major(model) if self._cpu and self._fp32 else model
        self._encode = _compile(_own(self._traced.encode), self._cpu)
        self._encode_one = ExportedEncoder(self._traced, self.program_settings) if self._cpu else None
        self._cross: tuple | None = None  # the last single sentence's (enc, cross-attention keys and values)
        self._steps: dict[tuple, object] = {}  # search_step's key -> the compiled step

    def program_settings(self, rows: int) -> dict:
        """Inductor's settings for a graph whose products have ``rows`` rows (a symbolic count:
        its first call's) on this wrapper's device and dtype; see ``_frozen_settings``."""
        return _frozen_settings(self._cpu, one_fp32_row=rows == 1 and self._fp32)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self._fp32 else next(self.model.parameters()).dtype

    def encode(self, src: Tensor) -> EncoderOutLike:
        if self._encode_one is not None and src.size(0) == 1:
            # One sentence: a program compiled ahead of time, which computes the decoder's
            # cross-attention keys and values too (``init_cache`` takes them).
            enc, cross = self._encode_one(src)
            self._cross = (enc, cross)
            return enc
        with self._frozen:
            return self._encode(src)

    def init_cache(self, enc: EncoderOutLike, beams: int = 1) -> StaticKVCache:
        if self._cross is None or self._cross[0] is not enc:
            return self.model.init_cache(enc, static=True, beams=beams)
        cross, self._cross = self._cross[1], None
        return self.model.decoder.init_cache(enc.memory, enc.src_pad_mask, True, beams, cross=cross)

    def decode_step(self, tokens: Tensor, enc: EncoderOutLike, cache: StaticKVCache):
        return self.search_step(_decode_step, ("decode_step",))(tokens, enc, cache)

    def decode_step_logits(self, tokens: Tensor, enc: EncoderOutLike, cache: StaticKVCache):
        return self.search_step(_decode_step_logits, ("decode_step_logits",))(tokens, enc, cache)

    def decode_step_states(self, tokens: Tensor, enc: EncoderOutLike, cache: StaticKVCache):
        return self.search_step(_decode_step_states, ("decode_step_states",))(tokens, enc, cache)

    def project(self, states: Tensor) -> Tensor:
        return self.model.project(states)

    def project_ids(self, states: Tensor, ids: Tensor) -> Tensor:
        return self.model.project_ids(states, ids)

    def search_step(self, make, key: tuple):
        """A search's step compiled as one graph with the decoder step it calls: ``make(model)``
        builds it over the wrapped model (its signature ``(tokens, enc, cache, *tensors)``, the
        decoder step's first three), ``key`` names it (the search and its settings); each is
        compiled once per wrapper. Greedy search's step-and-argmax and beam search's
        step-candidates-survivors run this way (``greedy._next_token_fn``,
        ``beam._step_fns``), and so does the decoder step alone (``decode_step``)."""
        step = self._steps.get(key)
        if step is None:
            step = self._steps[key] = _CompiledStep(self, make, key)
        return step

    def _run(self, step, tokens: Tensor, enc: EncoderOutLike, cache: StaticKVCache, *rest: Tensor):
        _ready(cache, tokens.size(0))
        # Freezing is inductor's switch for treating the weights as constants; it is set around
        # these calls only, never for the whole process, where it
        # would freeze a compiled validation loss in the middle of training. (As an option of
        # torch.compile it is read too late to take effect.)
        cache.limit(tokens.size(1))
        try:
            with self._frozen, self._dynamo:
                return step(tokens, enc, cache, *rest)
        finally:
            cache.limit(None)


class _CompiledStep:
    """One search step of a wrapper: under ``torch.compile`` (``compiled``); on a CPU, one
    sentence's step (its one row, or its beams) runs a program compiled ahead of time instead
    (``exported``, ``decoding.exported``): there the call's own cost, not the step's, was a
    seventh of it. A batch's step stays under ``torch.compile``, where the call's cost is
    shared by its rows (and the exported programs with symbolic rows ran slower)."""

    def __init__(self, wrapper: CompiledDecoding, make, key: tuple):
        self.wrapper, self.key = wrapper, key
        self.compiled = _compile(_own(make(wrapper._traced)), wrapper._cpu)
        self.exported = ExportedStep(make, wrapper._traced, wrapper.program_settings) if wrapper._cpu else None

    def __call__(self, tokens: Tensor, enc: EncoderOutLike, cache: StaticKVCache, *rest: Tensor):
        if self.exported is None or cache.cross(0)[0].size(0) > 1:  # a GPU, or several sentences
            return self.wrapper._run(self.compiled, tokens, enc, cache, *rest)
        _ready(cache, tokens.size(0), together=True)
        return self.exported(tokens, enc, cache, *rest)


def _decode_step(model: nn.Module):
    return model.decode_step


def _decode_step_logits(model: nn.Module):
    return model.decode_step_logits


def _decode_step_states(model: nn.Module):
    return model.decode_step_states


def _input_major(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose ``nn.Linear`` weights are stored input-major: the same
    ``(out, in)`` tensors, laid out as their transpose, so that ``F.linear``'s product reads a
    contiguous ``(in, out)`` matrix. MKL's product, which a single fp32 row gets
    (``_frozen_settings``), reads it faster than the transposed one: on an AMD EPYC the model's
    21 products of one row took 1.06-1.23 ms against 1.5-2.2 (one thread); on an Intel Xeon one
    row cost the same either way and five rows 0.61 ms against 1.00 (docs/experiments.md). The
    weights packed for oneDNN do not depend on it, so a bf16 model, whose products are all
    packed, is traced as it is: its beam search gathers rows of the output layer
    (``project_ids``), which input-major storage scatters (3.5 against 0.18 ms a step of 500
    rows). A linear layer tied to an embedding (the output layer) gets a copy of
    its own: the embedding keeps its rows contiguous, since it reads one per token (as one
    column of an input-major table, a batch's 2,000 source tokens took 5.6 ms). The copy holds
    the weights a second time while the wrapper lives; the wrapped model is left as it is."""
    copy = deepcopy(model)
    with torch.no_grad():
        for module in copy.modules():
            if isinstance(module, nn.Linear) and module.weight.dim() == 2:
                weight = module.weight
                module.weight = nn.Parameter(weight.detach().t().contiguous().t(), weight.requires_grad)
    return copy


def _own(fn):
    """``fn`` (a function or bound method) over a copy of its code object. Dynamo keeps the graphs
    it compiles in a list on the code object, the one last used first: two wrappers of one model
    class would share ``decode_step``'s list, so two models used in turn (a server's) each checked
    and failed the other's guards at every step (one sentence at a time: 33 ms a sentence against
    24), and four models would overflow the list's limit and run eagerly. With a copy, each
    wrapper's graphs are its own."""
    func = getattr(fn, "__func__", fn)
    copy = types.FunctionType(func.__code__.replace(), func.__globals__, func.__name__, func.__defaults__,
                              func.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = func.__kwdefaults__, func.__qualname__
    return copy.__get__(fn.__self__) if hasattr(fn, "__self__") else copy


def _compile(fn, cpu: bool):
    """``fn`` compiled with symbolic sizes, with the guards on the modules it reads cut to the
    identity of their weights (``_weights_and_inputs``). On a CPU, ``cpp_wrapper`` generates the
    code that calls the graph's kernels and products in order as C++ rather than Python (a batch-1
    step spent a few hundred microseconds in a Python wrapper)."""
    return torch.compile(fn, dynamic=True, options={"guard_filter_fn": _weights_and_inputs, "cpp_wrapper": cpu})


def _weights_and_inputs(guards) -> list[bool]:
    """Which of dynamo's guards a compiled call checks: all those on its inputs (sizes, dtypes,
    devices), and of those on the modules only that each weight is the very tensor the graph was
    traced with. The weights are constants of the graph (see the module doc), so a second model
    of the same class must fail these and get a graph of its own; the rest (each module's type,
    attributes, every layer norm's eps and dropout's p) cost a batch-1 step more than a tenth of a
    millisecond and can only change if the model is edited in place, which a wrapper does not
    allow."""
    return [g.guard_type == "ID_MATCH" or not g.orig_guard.source.is_unspecialized_nn_module() for g in guards]


def _frozen_settings(cpu: bool, one_fp32_row: bool = False) -> dict:
    """Inductor's settings for a compiled decoding call. On a CPU the weights are constants of
    the graph (``freezing``), packed once into oneDNN's blocked layout (``cpp.weight_prepack``),
    except in a program whose products have one fp32 row (a sentence's greedy step), which is
    not frozen: its products stay MKL's plain ones (``accel.linear`` draws the same line), and
    the weights are still the program's constants (``decoding.exported``). Inductor registers
    its packing passes at the first frozen compile in a process and applies them to every
    frozen compile after it, whatever that compile's settings, so a program that must not be
    packed must not be frozen. On a 2-core AMD EPYC, one thread: one sentence's beam-5 step took
    1.9 ms packed against 4.1 plain, a greedy step 1.6-1.9 unfrozen against 2.0-2.3 packed
    (oneDNN's layout for one row is slow there), whole files decoded 1.19× (greedy) and 1.29×
    (beam 5) faster packed, and bf16 one sentence at a time 1.6× faster (docs/experiments.md)."""
    if not cpu or one_fp32_row:
        return {"freezing": False}
    return {"freezing": True, "cpp.weight_prepack": True}


def _dynamo_settings():
    """Tracing without "duck" shapes: two sizes equal in the first batch (the keys seen and the
    source length, say) would otherwise share one symbol, and a later batch where they differ
    would recompile. The guards on those symbolic sizes are compiled to C++ rather than
    evaluated as Python expressions at every call."""
    return _Both(torch.fx.experimental._config.patch(use_duck_shape=False),
                 torch._dynamo.config.patch(enable_cpp_symbolic_shape_guards=True))


class _Both:
    """Two reusable context managers entered as one."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __enter__(self):
        self.first.__enter__()
        self.second.__enter__()

    def __exit__(self, *exc):
        self.second.__exit__(*exc)
        self.first.__exit__(*exc)


def _ready(cache: StaticKVCache, rows: int, together: bool = False) -> None:
    """Allocate the buffers for ``rows`` decoder rows before the first compiled step (shaped
    after the cross-attention keys), so that the traced step never sees them missing;
    ``together``: as views of one tensor (``StaticKVCache.allocate``)."""
    if not cache.allocated:
        cache.allocate(cache.cross(0)[0], rows, together)


def compiled_decoding(model: nn.Module, device: torch.device | str = "cpu") -> CompiledDecoding:
    """The one place decoding is compiled (``decode.compile=true``); see the module doc."""
    if not hasattr(model, "decode_step") or not hasattr(getattr(model, "decoder", None), "init_cache"):
        raise ValueError(f"decode.compile=true compiles one autoregressive model, not a {type(model).__name__} "
                         f"(ensembles decode eagerly): set decode.compile=false")
    if any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        # torch.compile cannot trace torch.ao's quantized layers (what quantize=int8 makes).
        raise ValueError("decode.compile=true and quantize=int8 do not combine: choose one")
    return CompiledDecoding(model, device)
