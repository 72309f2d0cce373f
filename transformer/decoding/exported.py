"""A search's step compiled ahead of time on a CPU: ``torch.export`` and AOTInductor.

A compiled step called through ``torch.compile`` pays, at every call, for dynamo's check that
its inputs fit one of the graphs it holds and for the Python around that check: one sentence
at a time, about 0.17 ms of a 1.25 ms greedy step on a CPU. ``ExportedStep`` compiles the same
step from the same modules into a shared library instead (AOTInductor: inductor's C++ code, the
weights its constants, frozen and packed as ``decoding.compiled`` sets) and calls it directly. The program
checks nothing itself: the check that a call's inputs fit it is the comparisons of ``_Shapes``,
made in Python from the sizes ``torch.export`` recorded (about 11 microseconds a call). One
sentence at a time, greedy decoding took 19 ms a sentence against 22 (the CPU recipe's de→en
checkpoint, one thread; ``decoding.compiled`` uses these programs for single sentences), and
18.6 with the encoder compiled the same way (``ExportedEncoder``).

A step is ``fn(tokens, enc, cache, *rest) -> (*outputs, cache)`` (greedy's step-and-choice,
beam search's step-candidates-survivors, the decoder step) over an ``EncoderOut``-like ``enc``
and a ``StaticKVCache``. It is exported as a function of plain tensors: the tokens, the encoder
output's fields, the cache's tensors (``StaticKVCache.tensors``, among them one whose length is
the number of cached steps the step sees) and ``rest``; the step writes the cache's buffers in
place, as it does eagerly. The sizes that change from call to call are symbolic (rows, source
length, steps: ``StaticKVCache.varying``, and every size of ``rest`` but 1); the others (the
model's widths, the heads) and every size of 1 are fixed in the program. Inputs of another kind
(a size of 1 where the program has a symbolic size, another dtype) get a program of their own,
compiled at their first call; every input but the cache's (contiguous already, and written in
place) is made contiguous, the layout the programs are compiled for.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import fields
from itertools import chain
from operator import itemgetter

import sympy
import torch
from torch import Tensor, nn
from torch.export import Dim
from torch.utils import _pytree as pytree

from transformer.modules.kv_cache import StaticKVCache


class ExportedStep:
    """``make(model)`` (a search's step, see the module doc) compiled ahead of time, one program
    per kind of input (the model's encoder output and cache, and ``_layout``); ``settings(rows)``:
    inductor's settings for a program whose products have ``rows`` rows."""

    def __init__(self, make, model: nn.Module, settings: Callable[[int], dict]):
        self.make, self.model, self.settings = make, model, settings
        self._programs: dict[tuple, _Program] = {}
        self._last: _Program | None = None

    def __call__(self, tokens: Tensor, enc, cache: StaticKVCache, *rest: Tensor):
        # The cache's tensors are contiguous and written in place: passed as they are.
        inputs = [tokens.contiguous(), *_fields(enc), *cache.tensors(tokens.size(1)), *(x.contiguous() for x in rest)]
        program, mode = self._last, (cache.group, cache.source_mask_set)
        # The program of the last call, if the inputs are of its kind; else the kind's own.
        if program is None or program.mode != mode or not program.fits(inputs):
            kind = (type(enc), cache.n_layers, *mode, _layout(inputs))
            program = self._programs.get(kind)
            if program is None:
                program = self._programs[kind] = self._compile(inputs, kind, cache.varying())
            program.shapes.check(inputs)
            self._last = program
        return (*program.run(*inputs), cache)

    def _compile(self, inputs: list, kind: tuple, varying: list) -> "_Program":
        """Export the step for inputs like ``inputs`` and compile it. ``varying``: the sizes of
        the cache's tensors that change from call to call (the encoder output's: rows and
        source length; the tokens' and ``rest``'s: all)."""
        module = _Flat(self.make, self.model, *kind[:4], len(varying))
        n_fields = len(fields(kind[0]))
        varying = [None, *[(0, 1)] * n_fields, *varying] + [None] * (len(inputs) - 1 - n_fields - len(varying))
        dims = tuple(None if x is None else {d: Dim.AUTO for d in range(x.dim())
                                             if x.size(d) != 1 and (v is None or d in v)}
                     for x, v in zip(inputs, varying))
        program = _compile(module, inputs, (dims[0], dims[1:]), self.settings(inputs[0].size(0)))
        program.mode = kind[2:4]
        return program


class ExportedEncoder:
    """One sentence's encoder compiled ahead of time, with every decoder layer's
    cross-attention keys and values of its output (``decoder.cross_kv``): ``src (1, S) ->
    (enc, cross)``, the source length symbolic; ``settings(rows)``: inductor's settings for a
    program whose products have ``rows`` rows (the source's tokens)."""

    def __init__(self, model: nn.Module, settings: Callable[[int], dict]):
        self.model, self.settings = model, settings
        self._program: _Program | None = None
        self._module: _Encode | None = None

    def __call__(self, src: Tensor):
        src = src.contiguous()
        if self._program is None or self._dtype != src.dtype:
            with torch.no_grad():
                probe = self.model.encode(src)  # which of the output's fields exist
            self._module, self._dtype = _Encode(self.model, type(probe), [v is not None for v in _fields(probe)]), src.dtype
            self._program = _compile(self._module, [src], ({1: Dim.AUTO},), self.settings(src.numel()))
        self._program.shapes.check([src])
        return self._module.unflatten(self._program.run(src))


class _Encode(nn.Module):
    """The encoder and the cross-attention projections over plain tensors: returns the encoder
    output's fields that are not None, then every layer's keys, then its values."""

    def __init__(self, model: nn.Module, enc_type, present: list[bool]):
        super().__init__()
        self.model = model
        self.enc_type, self.present = enc_type, present  # which of the output's fields exist

    def forward(self, src: Tensor):
        enc = self.model.encode(src)
        cross = self.model.decoder.cross_kv(enc.memory, enc.src_pad_mask)
        values = [v for v in _fields(enc) if v is not None]
        return (*values, *(k for k, _ in cross), *(v for _, v in cross))

    def unflatten(self, outputs):
        n = sum(self.present)
        values = list(outputs[:n])
        enc = self.enc_type(*(values.pop(0) if here else None for here in self.present))
        layers = (len(outputs) - n) // 2
        return enc, list(zip(outputs[n: n + layers], outputs[n + layers:]))


def _compile(module: nn.Module, inputs: list, dims: tuple, settings: dict) -> "_Program":
    """``module`` exported for inputs like ``inputs`` (``dims``: its sizes that vary) and
    compiled by AOTInductor with inductor's ``settings``."""
    # Copies: a cache's buffers may be views of one tensor, which export would take for inputs
    # that alias one another; the program only ever writes each buffer's own part.
    examples = tuple(None if x is None else x.clone() for x in inputs)
    with torch.fx.experimental._config.patch(use_duck_shape=False):
        exported = torch.export.export(module, examples, dynamic_shapes=dims)
    package = io.BytesIO()
    torch._inductor.aoti_compile_and_package(exported, package_path=package, inductor_configs=settings)
    package.seek(0)
    program = _direct(torch._inductor.aoti_load_package(package, run_single_threaded=True))
    return _Program(program, _Shapes(exported, inputs), tuple(None if x is None else x.dtype for x in inputs))


def _direct(compiled):
    """The loaded program ``compiled`` called without the general call's work around it: that
    call reads the program's input and output structure back from their serialised form and
    flattens and unflattens the arguments through ``pytree`` at every call, which cost a
    sentence's step about 40 microseconds on a CPU. Here the inputs are the tensors that are
    not None, in order (what flattening them gives), and the outputs come back as a tuple,
    which is checked once: a program whose outputs are structured otherwise keeps the general
    call."""
    loader = compiled.loader
    out_spec = pytree.treespec_loads(loader.get_call_spec()[1])
    flat = list(range(out_spec.num_leaves))
    if pytree.tree_unflatten(flat, out_spec) != tuple(flat):
        return compiled

    def run(*inputs):
        return tuple(loader.boxed_run([x for x in inputs if x is not None]))
    return run


def _fields(enc) -> list:
    return [getattr(enc, f.name) for f in fields(enc)]


def _layout(inputs: list) -> tuple:
    """What every program is specialised to: each input's dtype, device, and which of its sizes
    are 1 (or None for an absent input)."""
    return tuple(None if x is None else (x.dtype, x.device, tuple(n == 1 for n in x.shape)) for x in inputs)


class _Program:
    """A compiled program (``run``), the sizes (``shapes``) and dtypes it was compiled for,
    and, for a step, the cache's group and source-mask mode (``mode``)."""

    def __init__(self, run, shapes: "_Shapes", dtypes: tuple):
        self.run, self.shapes, self.dtypes, self.mode = run, shapes, dtypes, None

    def fits(self, inputs: list) -> bool:
        """Whether ``inputs`` are of the kind compiled for: dtypes, absent inputs, sizes."""
        if tuple(None if x is None else x.dtype for x in inputs) != self.dtypes:
            return False
        try:
            self.shapes.check(inputs)
        except ValueError:
            return False
        return True


class _Flat(nn.Module):
    """The step over plain tensors: rebuilds ``enc`` and the cache around them, calls the step
    and returns its outputs without the cache (whose tensors the step updates in place)."""

    def __init__(self, make, model: nn.Module, enc_type, n_layers: int, group: int, masked: bool, n_cache: int):
        super().__init__()
        self.model = model  # registered: its weights are the program's (frozen) constants
        self.fn = make(model)
        self.enc_type, self.n_fields, self.n_cache = enc_type, len(fields(enc_type)), n_cache
        self.n_layers, self.group, self.masked = n_layers, group, masked

    def forward(self, tokens: Tensor, *tensors):
        enc = self.enc_type(*tensors[: self.n_fields])
        end = self.n_fields + self.n_cache
        cache = StaticKVCache.of_tensors(self.n_layers, self.group, self.masked, *tensors[self.n_fields: end])
        return tuple(self.fn(tokens, enc, cache, *tensors[end:])[:-1])


class _Shapes:
    """The sizes a program accepts, as ``torch.export`` recorded them: for each input's each
    size a number, a symbol (the same symbol, the same size; within its range) or an expression
    of symbols. ``check`` raises ``ValueError`` for inputs outside them (which the program,
    holding no check of its own, would misread).

    The check reads every present input's sizes into one flat list and compares them with
    ``operator.itemgetter``s (the fixed sizes in one comparison, each symbol's occurrences in
    one): about 11 microseconds a call on a CPU, where comparing them size by size took 18."""

    def __init__(self, exported, inputs: list):
        placeholders = [n for n in exported.graph.nodes if n.op == "placeholder"]
        user = {spec.arg.name for spec in exported.graph_signature.input_specs
                if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT}
        vals = [n.meta.get("val") for n in placeholders if n.name in user]
        if len(vals) != len(inputs):
            raise RuntimeError(f"the exported step has {len(vals)} inputs, not {len(inputs)}")
        self.where: list[tuple[int, int]] = []  # flat position -> (input, dim)
        fixed: list[tuple[int, int]] = []  # (flat position, size)
        symbols: dict[object, list[int]] = {}  # symbol -> its flat positions
        self.derived: list[tuple[int, object, tuple]] = []  # (flat position, expression, its symbols)
        for i, (x, val) in enumerate(zip(inputs, vals)):
            for d, size in enumerate(() if x is None else val.shape):
                pos, expr = len(self.where), sympy.sympify(size if isinstance(size, int) else size.node.expr)
                self.where.append((i, d))
                if expr.is_Integer:
                    fixed.append((pos, int(expr)))
                elif expr.is_Symbol:
                    symbols.setdefault(expr, []).append(pos)
                else:
                    syms = tuple(expr.free_symbols)
                    self.derived.append((pos, sympy.lambdify(syms, expr), syms))
        self.ranks = tuple(len(val.shape) for x, val in zip(inputs, vals) if x is not None)
        self.fixed_positions = [p for p, _ in fixed]
        self.fixed, template = _getter(self.fixed_positions), [0] * len(self.where)
        for p, n in fixed:
            template[p] = n
        self.fixed_sizes = self.fixed(template)
        ranges = {sym: (_bound(r.lower), _bound(r.upper)) for sym, r in exported.range_constraints.items()}
        self.symbols = [(sym, positions, _getter(positions), ranges.get(sym, (0, float("inf"))))
                        for sym, positions in symbols.items()]

    def check(self, inputs: list) -> None:
        shapes = [x.shape for x in inputs if x is not None]
        if tuple(map(len, shapes)) != self.ranks:
            raise ValueError(f"inputs of {[len(s) for s in shapes]} dimensions, the compiled step wants {list(self.ranks)}")
        sizes = list(chain.from_iterable(shapes))
        if self.fixed(sizes) != self.fixed_sizes:
            pos, want = next((p, n) for p, n in zip(self.fixed_positions, self.fixed_sizes) if sizes[p] != n)
            raise ValueError(self._differs(pos, sizes[pos], want))
        bound = {}
        for sym, positions, get, (low, high) in self.symbols:
            size = sizes[positions[0]]
            seen = get(sizes)
            if seen.count(size) != len(seen):
                pos = next(p for p in positions if sizes[p] != size)
                raise ValueError(self._differs(pos, sizes[pos], f"{sym} ({size} elsewhere)"))
            if not low <= size <= high:
                raise ValueError(f"size {size} is outside the compiled step's range {low}..{high} for {sym}")
            bound[sym] = size
        for pos, expr, syms in self.derived:
            if any(s not in bound for s in syms) or expr(*(bound[s] for s in syms)) != sizes[pos]:
                i, d = self.where[pos]
                raise ValueError(f"input {i}'s size at dim {d} does not follow the compiled step's other sizes")

    def _differs(self, pos: int, size: int, want) -> str:
        i, d = self.where[pos]
        return f"input {i} has size {size} at dim {d}, the compiled step wants {want}"


def _getter(positions: list[int]):
    """A function from a flat list to the tuple of its items at ``positions``, at C speed (a
    single position is read twice, so that the result is a tuple all the same)."""
    if not positions:
        return lambda sizes: ()
    return itemgetter(*positions) if len(positions) > 1 else itemgetter(positions[0], positions[0])


def _bound(value) -> float:
    """A range's end as a Python number (infinite ends as floats)."""
    return int(value) if value.is_Integer else (float("inf") if value > 0 else float("-inf"))
