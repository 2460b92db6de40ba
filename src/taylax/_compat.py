"""Every use of JAX internals in taylax goes through this module.

taylax interprets jaxprs, so it needs JAX's jaxpr types and the primitives that
carry sub-programs. Public `jax.extend` and `jax.lax` names are preferred; the
few private imports below are each commented with why they are needed, so a
JAX upgrade touches only this file.
"""

from __future__ import annotations

import functools

import jax
import jax.extend.core as jex_core
import jax.extend.core.primitives as jex_prims
from jax import lax
from jax._src import core as _core

ClosedJaxpr = jex_core.ClosedJaxpr
Jaxpr = jex_core.Jaxpr
JaxprEqn = jex_core.JaxprEqn
Literal = jex_core.Literal
Primitive = jex_core.Primitive
Var = jex_core.Var


def _core_name(name: str):
    # Public in `jax.extend.core` from jax 0.10; in jax 0.9 only in `jax._src.core`.
    return getattr(jex_core, name, None) or getattr(_core, name)


DropVar = _core_name("DropVar")
check_jaxpr = _core_name("check_jaxpr")
jaxprs_in_params = _core_name("jaxprs_in_params")
subjaxprs = _core_name("subjaxprs")

# --------------------------------------------------------------------------------------
# Jaxprs and their constants.
# JAX 0.11.0 merged ClosedJaxpr into Jaxpr (jax/_src/core.py: `ClosedJaxpr = Jaxpr`): a
# jaxpr holds its constants' values (`consts`), `.jaxpr` is the jaxpr itself (a legacy
# accessor JAX means to delete), and every jaxpr is an instance of `ClosedJaxpr`. Since
# then (JAX's main branch after 0.11.0), a jaxpr's `constvars` are exactly its first
# `len(consts)` inputs, so a jaxpr traced with constants whose values it was not given
# lists them among its `invars`. Code that reads jaxprs goes through these helpers, which
# read either layout.
# --------------------------------------------------------------------------------------

JAXPR_HOLDS_CONSTS: bool = ClosedJaxpr is Jaxpr


def is_jaxpr(value) -> bool:
    """Whether `value` is a jaxpr, closed or open."""
    return isinstance(value, Jaxpr | ClosedJaxpr)


def is_closed_jaxpr(value) -> bool:
    """Whether `value` is a closed jaxpr: a jaxpr together with its constants' values."""
    if not JAXPR_HOLDS_CONSTS:
        return isinstance(value, ClosedJaxpr)
    # A merged jaxpr is closed when every constant variable has its value attached.
    return isinstance(value, Jaxpr) and len(value.consts) == len(value.constvars)


def open_jaxpr(jaxpr) -> Jaxpr:
    """The variables and equations of a closed jaxpr (an open jaxpr is returned as is)."""
    if not JAXPR_HOLDS_CONSTS and isinstance(jaxpr, ClosedJaxpr):
        return jaxpr.jaxpr
    return jaxpr


def closed_parts(closed) -> tuple[Jaxpr, list]:
    """`(jaxpr, consts)` of a closed jaxpr, as jaxpr interpreters take them."""
    return open_jaxpr(closed), closed.consts


def input_vars(jaxpr: Jaxpr, num_consts: int) -> tuple[list, list]:
    """`(constant variables, argument variables)` of `jaxpr` run on `num_consts` constants.

    As `jax.core.eval_jaxpr(jaxpr, consts, *args)` binds them: JAX <= 0.10 pairs `consts`
    with `jaxpr.constvars`; a merged jaxpr binds `[*consts, *args]` to `all_invars`, whose
    const/argument boundary is where the values were attached (or not) at construction.
    """
    all_invars = getattr(jaxpr, "all_invars", None)
    if all_invars is None:  # JAX <= 0.10: constvars and invars are separate lists
        return jaxpr.constvars, jaxpr.invars
    return all_invars[:num_consts], all_invars[num_consts:]


# Primitives that carry sub-programs.
jit_p = jex_prims.jit_p
closed_call_p = jex_prims.closed_call_p
remat_p = jex_prims.remat_p
custom_jvp_call_p = jex_prims.custom_jvp_call_p
custom_vjp_call_p = jex_prims.custom_vjp_call_p
add_any_p = jex_prims.add_jaxvals_p
device_put_p = jex_prims.device_put_p


def call_body(eqn: JaxprEqn) -> tuple[Jaxpr, list] | None:
    """`(jaxpr, consts)` of an equation that runs a program of its own inline (`jit`,
    `closed_call`, `checkpoint`, and the primal functions of `custom_jvp_call` and
    `custom_vjp_call`), else None."""
    params = eqn.params
    if eqn.primitive is jit_p:
        return closed_parts(params["jaxpr"])
    if eqn.primitive in (closed_call_p, custom_jvp_call_p, custom_vjp_call_p):
        return closed_parts(params["call_jaxpr"])
    if eqn.primitive is remat_p:
        return params["jaxpr"], []
    return None


# The windowed "select the max, gather the tangent" primitive JAX itself uses for
# the derivative of max pooling; reusing it matches nested jvp exactly.
select_and_gather_add_p = jex_prims.select_and_gather_add_p

# `lax.custom_linear_solve` (what `jnp.linalg.solve` and `inv` bind); used by
# _rules/_decompositions.py.
linear_solve_p = jex_prims.linear_solve_p


def bind_equation(eqn: JaxprEqn, args):
    """Re-bind `eqn`'s primitive on new arguments, as `jax.core.eval_jaxpr` does."""
    # JAX >= 0.9.2: get_bind_params returns the params dict (subfuns folded in).
    bind_params = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(bind_params, tuple):  # older JAX: (subfuns, params)
        subfuns, bind_params = bind_params
        return eqn.primitive.bind(*subfuns, *args, **bind_params)
    with eqn.ctx.manager:
        return eqn.primitive.bind(*args, **bind_params)


def bind_outputs(eqn: JaxprEqn, args) -> list:
    """`bind_equation`'s outputs as a list, whether or not the primitive has several."""
    out = bind_equation(eqn, args)
    return list(out) if eqn.primitive.multiple_results else [out]


def explicit_mesh_axes(x) -> tuple[str, ...]:
    """The mesh axes of JAX's explicit sharding (`jax.sharding.AxisType.Explicit`) that
    shard the type of array or tracer `x`, in the order its partition spec names them;
    `()` for unsharded values, automatic axes, and JAX versions without typed shardings."""
    try:
        sharding = jax.typeof(x).sharding
        kinds = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types, strict=True))
        spec = sharding.spec
    except (AttributeError, TypeError):
        return ()
    names = []
    for entry in spec:
        names += [entry] if isinstance(entry, str) else list(entry or ())
    return tuple(n for n in names if kinds.get(n) == jax.sharding.AxisType.Explicit)


def custom_jvp_rule_key(jvp_jaxpr_fun):
    """A hashable key for the user's jvp rule behind a `custom_jvp_call`, or None if unknown.

    The equation's `jvp_jaxpr_fun` is a thunk made afresh on every trace, so it never
    compares equal across traces; the rule function it wraps (and the flattening applied
    to it) does. taylax keys eager calls' compiled programs by jaxpr structure with it.
    """

    # Private: the thunk is `pe._memoize`d `jvp_jaxpr_thunk` closing over `jvp`, a
    # `lu.WrappedFun` of the user's rule. Its `_flatten_jvp` transformation also holds an
    # output-type thunk (a fresh lambda) determined by the primal jaxpr, which is keyed
    # separately, so it is left out.
    jvp = _custom_jvp_wrapped_rule(jvp_jaxpr_fun)
    if jvp is None:
        return None
    try:
        transforms = tuple(
            (gen, tuple(a for a in args if not _is_out_type_thunk(a)))
            for gen, args in jvp.transforms
        )
        key = ("custom_jvp_rule", jvp.f, transforms, jvp.params, jvp.in_type)
        hash(key)
    except Exception:  # a JAX version with another layout: callers key by identity
        return None
    return key


def _custom_jvp_wrapped_rule(jvp_jaxpr_fun):
    """The `lu.WrappedFun` of the user's rule behind a `custom_jvp_call`'s thunk, or None
    where this JAX lays it out otherwise (see `custom_jvp_rule_key`)."""

    def cells(fn) -> dict:
        names = fn.__code__.co_freevars
        return {n: c.cell_contents for n, c in zip(names, fn.__closure__ or ())}

    try:
        jvp = cells(cells(jvp_jaxpr_fun.f)["fn"])["jvp"]
        jvp.f  # noqa: B018 - a WrappedFun, or this layout is not JAX's
    except Exception:
        return None
    return jvp


def _is_out_type_thunk(a) -> bool:
    return callable(a) and "transformation_with_aux" in getattr(a, "__qualname__", "")


def eig_vector_derivatives_enabled(params) -> bool:
    """Whether an `eig` equation opted in to derivatives of its eigenvectors."""
    # `enable_eigvec_derivs` is new in jax 0.10; jax 0.9 never differentiates eigenvectors.
    return bool(params.get("enable_eigvec_derivs", False))


def all_primitives() -> dict[str, Primitive]:
    """Every primitive exported by `jax.lax` and `jax.extend.core.primitives`."""
    found: dict[str, Primitive] = {}
    for module in (lax, jex_prims):
        for name in dir(module):
            obj = getattr(module, name)
            if name.endswith("_p") and isinstance(obj, Primitive):
                found.setdefault(obj.name, obj)
    return found


def find_primitive(name: str) -> Primitive | None:
    """The primitive named `name` among `all_primitives()`, or None where JAX has none.

    Rules for primitives that only some JAX versions define are registered through this,
    so that they exist exactly where the primitive does.
    """
    return all_primitives().get(name)


# `lax.stage`, an identity marking a value for staging: new in jax 0.10 (None before).
stage_p = getattr(lax, "stage_p", None)

# `jnp.stack` binds a `stack` primitive from jax 0.10, which `jax.vmap` batches as a stack
# and a transpose to (points, K); before, it was a concatenate of broadcasts, batched as a
# concatenate along the points' minor axis, which XLA:CPU writes one row at a time
# (docs/EMISSION.md, "Outputs beside other outputs").
HAS_STACK_PRIMITIVE = find_primitive("stack") is not None

# Control flow (used by _rules/_control.py).
scan_p = jex_prims.scan_p
while_p = jex_prims.while_p
cond_p = jex_prims.cond_p

# The parameters of a `scan` equation that say how its operands split into constants,
# carry and scanned inputs (and its outputs into carry and stacked outputs): JAX <= 0.10
# has the counts `num_consts` and `num_carry`; JAX 0.11.0 replaced them by the flat-tree
# descriptors `ft_in` (consts, carry, xs) and `ft_out` (carry, ys) of
# jax/_src/lax/control_flow/loops.py (`_scan_impl`, `scan_p.bind` in `scan`).
SCAN_LAYOUT_PARAMS = frozenset({"num_consts", "num_carry", "ft_in", "ft_out"})


def scan_split(params) -> tuple[int, int]:
    """`(num_consts, num_carry)` of a `scan` equation, from either parameter style.

    The operands are `consts + carry + xs` in this order in both; `ft_in` groups them
    as a 3-tuple flat tree whose groups may be nested or filtered trees (the jvp rule
    pairs primals and tangents inside each group), so each group's leaves are counted.
    """
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(list(consts)), len(list(carry))


def callback_primitives() -> dict[str, Primitive]:
    """The host-callback primitives (`jax.pure_callback`, `io_callback`), by public name."""
    # Private: jax.extend exports no callback primitives.
    from jax._src import callback

    names = {
        "jax.pure_callback": "pure_callback_p",
        "jax.experimental.io_callback": "io_callback_p",
    }
    return {api: getattr(callback, p) for api, p in names.items() if hasattr(callback, p)}


def switch(index, branches, operands, branches_platforms=None):
    """`lax.switch`, keeping a `lax.platform_dependent` cond's per-platform branch table."""
    if branches_platforms is None:
        return lax.switch(index, branches, *operands)
    # Private: lax.switch cannot re-create a platform-dependent cond.
    from jax._src.lax.control_flow.conditionals import _switch_internal

    return _switch_internal(index, branches, operands, branches_platforms=branches_platforms)


# --------------------------------------------------------------------------------------
# Jaxpr construction and inspection for the jaxpr optimizer (taylax._optimize).
# --------------------------------------------------------------------------------------

# Public: building new equations, typed literals and fresh variables.
new_jaxpr_eqn = _core_name("new_jaxpr_eqn")
jaxpr_as_fun = jex_core.jaxpr_as_fun


def shaped_array(shape, dtype, weak_type: bool = False):
    """An abstract array value (the type of a jaxpr variable or literal)."""
    import jax

    return jax.core.ShapedArray(shape, dtype, weak_type=weak_type)


def is_tracer(x) -> bool:
    """Whether `x` is a tracer (a value known only at run time, e.g. a closed-over jit input)."""
    import jax

    return isinstance(x, jax.core.Tracer)


def dce_rule(primitive):
    """JAX's own dead-code rule for a primitive that carries sub-programs, or None.

    Private: `partial_eval.dce_rules` prunes unused outputs and inputs of `jit`, `scan`,
    `cond`, `remat`, `custom_jvp_call`, `custom_vjp_call`, `shard_map`, ... together with
    their sub-jaxprs; JAX exposes no public dead-code pass.
    """
    from jax._src.interpreters import partial_eval as pe

    return pe.dce_rules.get(primitive)


# The derivative primitive defines its own JVP, batching and lowering rules, which
# live in these (public) interpreter modules.
# Private: the tracer `jax.vmap` wraps values in. Taylor passes called on batched values
# bind `taylax._point_chunks.chunked_call_p`, whose batching rule sees the batch size; the public
# `jax.interpreters.batching` no longer exports the class.
from jax._src.interpreters.batching import BatchTracer as BatchTracer  # noqa: E402
from jax.interpreters import ad as ad, batching as batching, mlir as mlir  # noqa: E402


def define_as_function(prim, impl, abstract_eval, batch, lower=None):
    """Register `prim` as the JAX function `impl(*args, **params)`: its implementation,
    its lowering (unless `lower` is given), and its JVP (`impl`'s own, so that reverse
    mode transposes ordinary JAX operations); `abstract_eval` and `batch` (a
    `fancy_primitive_batchers` rule) are its own. Returns `impl_jaxpr(avals, **params)`:
    `impl`'s program as a closed jaxpr, for an interpreter with no rule for `prim`."""

    def jvp(primals, tangents, **params):
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return jax.jvp(lambda *a: impl(*a, **params), list(primals), tangents)

    def impl_jaxpr(avals, **params):
        return jax.make_jaxpr(lambda *a: impl(*a, **params))(*avals)

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    if lower is None:
        lower = mlir.lower_fun(impl, multiple_results=prim.multiple_results)
    mlir.register_lowering(prim, lower)
    ad.primitive_jvps[prim] = jvp
    batching.fancy_primitive_batchers[prim] = batch
    return impl_jaxpr


def consts_to_invars(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """Turn a closed jaxpr's constants into leading inputs; return it and the constants.

    Constants of a jaxpr traced inside another transformation can be tracers of
    that transformation; as explicit operands they are seen by it.
    """
    jaxpr, consts = closed_parts(closed)
    constvars, invars = input_vars(jaxpr, len(consts))
    if not constvars and not consts:
        return closed, []
    debug = jaxpr.debug_info
    if debug is not None and getattr(debug, "arg_names", None) is not None:
        names = ("const",) * len(constvars) + tuple(debug.arg_names)
        debug = debug._replace(arg_names=names)
    converted = Jaxpr([], [*constvars, *invars], jaxpr.outvars, jaxpr.eqns, jaxpr.effects, debug)
    return ClosedJaxpr(converted, []), list(consts)


# --- Multi-device (taylax._rules._parallel) ------------------------------------------------
# Sharding annotations and collectives. Those JAX exports publicly come from `jax.lax`; the
# rest have no public handle in JAX 0.10.2, so they are imported privately here.
sharding_constraint_p = lax.sharding_constraint_p
psum_p = lax.psum_p
pmax_p = lax.pmax_p
pmin_p = lax.pmin_p
ppermute_p = lax.ppermute_p
all_gather_p = lax.all_gather_p
all_to_all_p = lax.all_to_all_p
ragged_all_to_all_p = lax.ragged_all_to_all_p


def spec_partitions(spec) -> tuple:
    """A `PartitionSpec`'s per-dimension entries (without its reduced/unreduced axes)."""
    # Public `.partitions` from jax 0.10; jax 0.9 has only the private `_partitions`.
    return spec.partitions if hasattr(spec, "partitions") else spec._partitions


# Private: `pvary` marks a value as varying over manual axes (inserted by JAX under
# check_vma); a no-op on values.
from jax._src.core import pvary_p as pvary_p  # noqa: E402

# --------------------------------------------------------------------------------------
# Compile diagnostics (taylax._diagnostics). JAX reports trace/lower/compile durations
# through the public `jax.monitoring`, but only with a function *name*; to say WHY a
# function traced or compiled, the recorder must see each jitted call that reaches JAX's
# Python dispatch (the C++ fast path never does, so cached calls stay untouched) with its
# function object and arguments. Every private name it needs is here.
# --------------------------------------------------------------------------------------
# Private: the event names JAX records its durations under (jax._src.dispatch constants).
from jax._src.dispatch import (  # noqa: E402
    BACKEND_COMPILE_EVENT as BACKEND_COMPILE_EVENT,
    JAXPR_TO_MLIR_MODULE_EVENT as JAXPR_TO_MLIR_MODULE_EVENT,
    JAXPR_TRACE_EVENT as JAXPR_TRACE_EVENT,
)

# Private: collectives that `jax.lax.psum` / `all_gather` / `psum_scatter` emit inside
# shard_map with check_vma=True, and the older pbroadcast.
from jax._src.lax.parallel import (  # noqa: E402
    all_gather_invariant_p as all_gather_invariant_p,
    pbroadcast_p as pbroadcast_p,
    psum_invariant_p as psum_invariant_p,
    reduce_scatter_p as reduce_scatter_p,
)

# Private: `jax.sharding.reshard` binds this; no public handle to the primitive.
from jax._src.pjit import reshard_p as reshard_p  # noqa: E402

# Private: the shard_map primitive (re-bound through the public `jax.shard_map`).
from jax._src.shard_map import shard_map_p as shard_map_p  # noqa: E402


def shard_map_manual_axes(params: dict) -> frozenset:
    """The mesh axes a `shard_map` equation makes manual (`jax.shard_map`'s `axis_names`)."""
    # jax 0.10 renamed the parameter `manual_axes` to `newly_manual_axes`.
    return params["newly_manual_axes" if "newly_manual_axes" in params else "manual_axes"]


# Private: the functions of jax._src.pjit that `jax.jit`'s Python dispatch calls by
# global name on a C++ cache miss: argument inference (every call that reaches Python,
# nested calls during tracing included), tracing (only on a trace-cache miss), and the
# call that lowers and compiles (top level only). Wrapping these module globals is the
# only way to see a call's function object and arguments; the recorder restores them.
JIT_DISPATCH_FUNCTIONS = ("_infer_params", "_trace_for_jit", "_run_python_pjit")


def jit_dispatch_function(name: str):
    """The current `jax._src.pjit` function `name` (one of `JIT_DISPATCH_FUNCTIONS`)."""
    from jax._src import pjit

    return getattr(pjit, name)


def set_jit_dispatch_function(name: str, function) -> None:
    """Replaces `jax._src.pjit`'s module global `name` (used to install and remove hooks)."""
    from jax._src import pjit

    assert name in JIT_DISPATCH_FUNCTIONS, name
    setattr(pjit, name, function)


def jit_info_static(jit_info) -> tuple[tuple[int, ...], tuple[str, ...], object]:
    """(static_argnums, static_argnames, inspect.Signature or None) of a private PjitInfo."""
    return jit_info.static_argnums, jit_info.static_argnames, jit_info.fun_signature


def parse_jit_arguments(args, kwargs, static_argnums, static_argnames):
    """Splits a jitted call's arguments as JAX's trace cache key does.

    Returns (signature, dynamic_leaves): `signature` has `static_args`, `static_arg_names`,
    `dynamic_arg_names` and `dynamic_arg_treedefs` (one treedef per dynamic argument).
    """
    # Private: jaxlib's own argument parser, so the recorder's key matches JAX's exactly.
    from jax._src import tree_util
    from jax._src.lib import jax_jit

    # jax 0.10 added `tracing_registry`; jax 0.9's jit parses with `default_registry`.
    registry = getattr(tree_util, "tracing_registry", None) or tree_util.default_registry
    return jax_jit.parse_arguments(
        args,
        tuple(kwargs.values()),
        tuple(kwargs.keys()),
        static_argnums,
        static_argnames,
        registry,
    )


def trace_context_names() -> tuple[str, ...]:
    """Names of the config values that JAX puts in every trace cache key (x64, ...)."""
    # Private: JAX exposes no public view of the trace context.
    from jax._src import config

    if not hasattr(config.config_ext, "trace_context_names"):  # jaxlib < 0.10
        return _probed_trace_context_names(config)
    return tuple(config.trace_context_names())


def _probed_trace_context_names(config) -> tuple[str, ...]:
    # jax 0.9's jaxlib cannot name the trace context's entries: find each config state's
    # position by swapping a marker into it (thread-locally) and reading the context.
    holders = [*vars(config).items(), *config.config._value_holders.items()]
    states = {id(v): (k, v) for k, v in holders if isinstance(v, config.config_ext.Config)}
    names = {}
    for name, state in states.values():
        marker = object()
        previous = state.swap_local(marker)
        try:
            context = config.trace_context()
        finally:
            state.set_local(previous)
        names.update((i, name) for i, x in enumerate(context) if x is marker)
    return tuple(names.get(i, f"#{i}") for i in range(len(config.trace_context())))


def trace_context() -> tuple:
    """The current trace-context values, in the order of `trace_context_names()`."""
    from jax._src import config

    return tuple(config.trace_context())


def jit_trace_cache_keys(fun) -> list[tuple]:
    """JAX's trace-cache entries for `fun`: (trace_context, jit_info, signature, avals, mesh).

    Used to explain a trace when the recorder saw no earlier call of `fun` (it was warmed
    up before recording started).
    """
    # Private: the weakref-LRU cache behind jit's trace cache; keys are
    # (weakref(fun), trace_context, (jit_info, signature, avals, ctx_mesh), kwargs).
    from jax._src import pjit

    found = []
    for key in pjit._infer_params_cached.cache_keys():
        try:
            ref, context, rest = key[0], key[1], key[2]
            if ref() is fun and len(rest) == 4:
                found.append((tuple(context), *rest))
        except Exception:  # an unexpected key layout: explain with less
            continue
    return found


def jit_trace_cache_functions() -> list:
    """The live function objects that JAX's jit trace cache holds (jitted and called)."""
    # Private: the same cache as `jit_trace_cache_keys`; its keys start with weakref(fun).
    from jax._src import pjit

    found = []
    for key in pjit._infer_params_cached.cache_keys():
        try:
            fun = key[0]()
        except Exception:  # an unexpected key layout
            continue
        if fun is not None:
            found.append(fun)
    return found


def jit_lowering_in_shardings(jaxpr) -> list[tuple]:
    """The input shardings of JAX's cached lowerings of `jaxpr`, one tuple per entry.

    An entry is None where jit was free to place the argument (a NumPy array, a Python
    scalar or an uncommitted array), else the committed argument's sharding. Used to explain
    a compile without a trace when the earlier calls were made before recording started.
    """
    # Private: `_pjit_lower`'s weakref-LRU cache, keyed by (weakref(jaxpr), trace_context,
    # (in_shardings, out_shardings, ...), kwargs); in_shardings cover the jaxpr's consts
    # then the dynamic arguments. UnspecifiedValue marks an argument jit may place.
    from jax._src import pjit
    from jax._src.named_sharding import UnspecifiedValue

    found = []
    for key in pjit._pjit_lower.cache_keys():
        try:
            if key[0]() is jaxpr:
                shardings = key[2][0]
                found.append(
                    tuple(None if isinstance(s, UnspecifiedValue) else s for s in shardings)
                )
        except Exception:  # an unexpected key layout: explain with less
            continue
    return found


def is_committed(x) -> bool | None:
    """Whether a concrete `jax.Array` is committed to its device(s); None if unknown."""
    # Private attribute: committed-ness decides whether jit may move the array.
    committed = getattr(x, "_committed", None)
    return None if committed is None else bool(committed)


def jitted_function(f):
    """The Python function inside a `jax.jit`-wrapped callable, or `f` itself."""
    # Semi-private: jit's wrapper keeps the wrapped function as `_fun`.
    return getattr(f, "_fun", f)


# `jax.ad_checkpoint.checkpoint_name` binds this identity primitive (taylax._rules._special).
name_p = jex_prims.name_p

# `jax.random.gamma` / `loggamma` bind this; its jvp is `da * gamma_sample_grad(x, a)`.
random_gamma_p = jex_prims.random_gamma_p


def gamma_sample_grad(sample, a, log_space: bool):
    """JAX's derivative of a Gamma(a) sample with respect to `a` (implicit reparametrization)."""
    # Private: the function random_gamma_p's jvp rule calls; JAX exports no public handle.
    from jax._src.random.core import _gamma_grad

    return _gamma_grad(sample, a, log_space=log_space)


# The emission policy in force is part of JAX's trace context (like `jax.default_device`):
# a function jitted or traced under one policy is traced again under another, instead of
# JAX serving the program it cached for the first. Without this state (a JAX that lacks
# it), taylax keeps the policy in a context variable and JAX's own caches ignore it.
def trace_context_state(name: str, help_text: str):
    """A JAX configuration state whose value is part of the jit cache key and the trace
    context (`with state(value): ...`, `state.value`), or None where JAX has none."""
    from jax._src import config as _config

    try:
        return _config.string_or_object_state(
            name, None, help=help_text, include_in_jit_key=True, include_in_trace_context=True
        )
    except (AttributeError, TypeError):  # pragma: no cover - an older or newer JAX
        return None


# JAX raises a plain TypeError with this text (jax/_src/interpreters/ad.py and
# custom_derivatives.py, 0.9 to 0.11); no exception class of its own tells it apart.
_CUSTOM_VJP_JVP_ERROR = "forward-mode autodiff (jvp) to a custom_vjp"


def is_custom_vjp_jvp_error(error: BaseException) -> bool:
    """Whether `error` is JAX's refusal to differentiate a `jax.custom_vjp` function in
    forward mode (raised where the function is called under `jax.jvp`)."""
    return isinstance(error, TypeError) and _CUSTOM_VJP_JVP_ERROR in str(error)


def register_checkify_rule(primitive: Primitive, rule) -> None:
    """Give `jax.experimental.checkify` a rule for `primitive`:
    `rule(error, enabled_errors, *args, **params) -> (error, outputs)`."""
    # Private: checkify's rule table and its jaxpr interpreter have no public names.
    from jax._src import checkify as _checkify

    _checkify.error_checks[primitive] = rule


def checkify_jaxpr(closed: ClosedJaxpr, enabled_errors, error, *args):
    """Evaluate `closed` on `args` with its checks functionalized: `(error, outputs)`,
    `error` threaded through (checkify's own interpreter, as its rule for `jit` uses)."""
    from jax._src import checkify as _checkify

    return _checkify.checkify_jaxpr(closed, enabled_errors, error, *args)


def custom_jvp_rule_function(jvp_jaxpr_fun):
    """The user's jvp rule function behind a `custom_jvp_call` (see `custom_jvp_rule_key`),
    or None where this JAX lays the thunk out otherwise. Found also where the rule has
    static arguments that make no key (`jax.scipy.special.log_ndtr`'s `series_order`)."""
    jvp = _custom_jvp_wrapped_rule(jvp_jaxpr_fun)
    return None if jvp is None else jvp.f


@functools.cache
def logaddexp_jvp_rules() -> dict:
    """JAX's own jvp rules of `jnp.logaddexp` (behind `jax.nn.softplus` and
    `jax.nn.log_sigmoid`) and `jnp.logaddexp2`, by the base of their exponentials (`e`,
    2); empty where this JAX keeps them elsewhere."""
    try:
        from jax._src.lax import other
    except ImportError:  # pragma: no cover - a JAX that moved them: the rules as written
        return {}
    # A JAX that moved one: that function takes its rule as written.
    rules = {
        getattr(other, "_logaddexp_jvp", None): "e",
        getattr(other, "_logaddexp2_jvp", None): 2,
    }
    rules.pop(None, None)
    return rules


@functools.cache
def own_output_jvp_rules() -> dict:
    """JAX's jvp rules of the one-argument special functions whose tangent reads the
    function's own output, by name: `erfcx` (real arguments), `wofz` (behind complex
    `erfcx`), `dawsn` and `log_ndtr`; those this JAX lacks (0.9 has neither `erfcx` nor
    `dawsn`) or keeps elsewhere are left out, and take their rule as written."""
    try:
        from jax._src.scipy import special
    except ImportError:  # pragma: no cover - a JAX that moved them
        return {}
    rules = {
        getattr(getattr(special, "_erfcx", None), "jvp", None): "erfcx",
        getattr(getattr(special, "_wofz", None), "jvp", None): "wofz",
        getattr(getattr(special, "_dawsn", None), "jvp", None): "dawsn",
        getattr(special, "_log_ndtr_jvp", None): "log_ndtr",
    }
    rules.pop(None, None)
    return rules
