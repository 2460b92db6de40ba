"""The emission policy: every choice of *how* a Taylor pass is written as JAX operations.

A Taylor rule fixes what a pass computes; the policy fixes how it is emitted, which
changes no value but decides how fast XLA compiles and runs the program on a platform:
recurrences unrolled or in a loop, a value's coefficients as separate rows or as one
stacked array, large arrays in chunks of elements or of points, values marked to be
computed once into a buffer, blocks of directions for operators.

One immutable `EmissionPolicy` holds them all, with one instance per platform family
(`CPU` for XLA:CPU, `GPU` for CUDA and ROCm, `DEFAULT` for anything else). The rules
ask `current()`, which returns, in this order:

1. the policy a user set with `taylax.emission_policy(...)` (a context manager),
2. else the policy of the platform the program is being built for: the platform of
   `jax.default_device` where one is set, else of JAX's default backend.

A pass also keeps its emitted program within a size budget (`within_budget`): a user
program so large that rows and unrolled recurrences would multiply its size falls back
to the stacked forms. The figures behind each constant are in `docs/EMISSION.md`, each
with the committed script that measures it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator

import jax

from . import _compat, _pass
from ._count import iter_equations

__all__ = ["CPU", "DEFAULT", "GPU", "EmissionPolicy", "current", "emission_policy"]


@dataclasses.dataclass(frozen=True)
class EmissionPolicy:
    """How taylax writes a Taylor pass as JAX operations (values never depend on it).

    Orders are Taylor orders K (the truncation of the pass); "rows" are a value's
    coefficients kept as separate arrays, "stacks" one `(K + 1, *shape)` array.

    **Recurrences** (exp, log, powers, division, sin/cos, tanh: `taylax._series`):

    - `unroll_max_order`: recurrences up to this order run unrolled, one coefficient at a
      time (straight-line code, O(K^2) equations); past it, a `lax.fori_loop` over
      blocks of `recurrence_block` coefficients (O(1) equations in K).
    - `unroll_max_degree`, `unroll_low_degree_max_order`: recurrences whose known
      factor has degree at most `unroll_max_degree` run unrolled up to
      `unroll_low_degree_max_order` too (a coefficient sums that few terms: O(K)
      equations).
    - `loop_unroll_max_order`: the same bound inside the body of a `while` or `scan`,
      which runs its kernels once per step, so a larger body costs compile time and
      buys little (docs/EMISSION.md, "Recurrences unrolled to order 16").
    - `reciprocal_min_order`: from this order a stacked numerator over a low-degree
      denominator is a product with the reciprocal (the numerator read once, not one
      column per row).
    - `split_numerator_min_order`: from this order such a numerator is first split into
      rows computed once, which the recurrence reads (a product with the reciprocal of
      that many terms was one slow kernel under `vmap`); None never splits.
    - `recurrence_block`: coefficients per step of the loop.

    **Rows or stacks:**

    - `rows_max_order`: closed forms, powers and compositions are built row by row up to
      this order, and recurrences whose input has rows of its own run unrolled.
    - `loop_rows_max_order`: the same bound inside the body of a `while` or `scan`.
    - `product_rows_max_order`: a product read row by row (or of two factors with rows)
      is a sum of row products up to this order; `stacked_product_rows_max_order` for
      other products. Past them, shifted sums of stacks.
    - `fused_concat_max_operands`: rows stacked from at most this many operands are one
      expression the compiler fuses into its readers (XLA:CPU's limit).
    - `polynomial_rows_max_order`: tanh/tan along a line row by row up to this order.
    - `nested_rowless_max_elements`: a nested derivative (`taylax.derivative`,
      `taylax.jacfwd`), evaluated where its shapes are final, builds no rows when every
      value of its program has at most this many elements: such programs are
      dispatch-bound, and rows only add equations to trace and compile. None always
      builds them.
    - `stacked_output_max_order`: `derivatives` returns the pass's own stack up to this
      order; past it, the primal and the coefficients concatenated.
    - `selected_coefficients_max_order`: up to this order `taylor` returns the
      coefficients of a scalar output as a chain of selects over their rows, which
      XLA:CPU computes in one loop over points beside the primal
      (`taylax._outputs.selected_rows`); None: a stack. On a GPU each element would
      compute every row. `selected_derivatives_min_order` and
      `selected_derivatives_max_order`: the same for the stack of `derivatives` of a
      scalar output under `vmap` between these orders (before the pass's own stack).
    - `output_rows_apart_min_order`: from this order `derivatives` computes each of an
      output's rows into a buffer of its own (an optimization barrier) before stacking
      them, where the rows are known; None never does. On
      XLA:GPU a stack fused with the rows' expressions computes them once per row of the
      stack, each thread recomputing what the rows share.
    - `output_rows_apart_min_equations`: a `derivatives`, `taylor` or `jet` pass of at
      least this many equations (through nested jaxprs) computes each output row in a
      kernel of its own, at any order, and is not cut (`fusion_cut`); None never does.
      The rows go behind a barrier as one concatenate padded with constant elements past
      `fused_concat_max_operands`: XLA:CPU drops a barrier before fusion but fuses no
      concatenate of more operands, and a stack fused with its rows recomputed what
      they share once per row.

    **Chunks:**

    - `element_chunk`: stacked elements per chunk when an elementwise recurrence in a
      loop runs chunk by chunk over its elements (`lax.map`); None never chunks.
    - `point_chunks`: whether a large `vmap` of a pass may run as a loop over chunks of
      points (`taylax._point_chunks`, whose thresholds are `chunk_points` etc.);
      `chunk_max_bytes`: chunks are halved (down to `high_order_chunk_points`) until
      their buffers fit in it; None keeps `chunk_points`.
      `high_order_narrow_chunk_points`: the chunk past `high_order` of a pass whose
      inputs are all of 4 bytes or fewer (float32); None: `high_order_chunk_points`.
    - `elementwise_by_points_min_bytes`: a whole-array call of a function that maps
      elements independently, whose series take at least this many bytes (points times
      `K + 1` coefficients), runs as a `vmap` of its pass at one point over the flattened
      arrays where that `vmap` runs in chunks (`taylax._pointwise`); None never does.
      `elementwise_by_points_narrow_min_bytes`: the same threshold for a pass past
      `high_order` in a dtype of 4 bytes or fewer (float32), where the whole-array pass
      ran as fast as that `vmap` over more bytes; None: as the first.
      `elementwise_by_points_min_wide_kernels`: below those bytes, such a call still runs
      as that `vmap` where at least this many kernels of its pass each read
      `wide_kernel_min_operands` or more of the values it keeps in buffers (passes over
      memory that the chunks keep in cache); None: only by bytes.

    **Values computed once** (`taylax._once`): at orders up to
    `unmarked_any_size_max_order` no value batched by `jax.vmap` after the pass traced it
    is marked, and values the pass traced at their full shape are marked while smaller
    than `unbatched_unmarked_min_bytes` (None: never); up to `unmarked_max_order`, values
    of at least `unmarked_min_bytes` are not. `mark_values=False` never marks.
    `one_kernel_max_order`: scalar polynomial/trig passes up to this order keep no mark.
    `one_kernel_of_polynomials`: such passes may also hold `exp`, `log`, `log1p` and
    `sqrt` of polynomials and divisions by polynomials (`taylax._one_kernel`).
    `primal_once_max_order`: from past `unmarked_any_size_max_order` up to this order, a
    rule's transcendental values (the primal `exp x0`, `log x0`, `asinh x0`..., which
    every row of a product reads) are marked too (`taylax._series.once`); None: never.
    `partner_rows_unmarked_min_order`: from this order an unrolled sin, cos, sinh or cosh
    marks only its own rows; the partner's rows its recurrence also reads (cos beside
    sin) are left for XLA to recompute inside the kernels that read them. None: both.
    `riccati_rows_unmarked_max_order`: up to this order tanh's and the logistic's rows
    (their Riccati recurrence) are not marked either: XLA recomputes them in each kernel
    that reads them. None: marked past `unmarked_any_size_max_order` like other rows.
    `root_rows_unmarked_max_order`: the same for the rows of `sqrt` of a series of full
    degree (`y^2 = x`); `quotient_rows_unmarked_max_order` for a quotient's rows, past
    `unmarked_max_order`, and `series_quotient_rows_unmarked_max_order` for those of a
    quotient by a series of full degree (`sin t / (2 + cos t)`, `tan`: each row reads every
    row before it, where a polynomial's few coefficients give few reads; over a whole
    array they stay marked). Those rows, tanh's and the logistic's are still marked
    where smaller than `rows_unmarked_min_bytes` when the program is lowered (a small
    network's layer, where a buffer stays in cache; never up to `unmarked_max_order`);
    None: marked at every size.

    **Products of series matrices** (`taylax._rules._linalg`): one dot per pair of rows
    up to `pair_dots_max_degree` from `pair_dots_min_work` multiply-adds; one dot per row
    of a series times a constant up to `row_dots_max_degree` from `row_dots_min_bytes`
    per row; products of at most `small_product` multiply-adds as multiply-and-sum.

    **Operators** (`taylax._operators`): summed passes over at least
    `blocked_min_directions` directions run in blocks (`blocked_directions`), unrolled
    blocks of `unrolled_block` up to `unrolled_max_blocks`, else a loop over blocks of
    `direction_block`.

    **Overflow:** `guarded_products`: a scalar product as a Toeplitz dot (the compact
    form, `scalar_products_as_dots`) keeps an overflowed coefficient of one factor out of
    the lower rows (which the table's `inf * 0` would make NaN). Off in both built-in
    policies (six equations per product, a fifth more in a large program); the unscaled
    fallback of `derivatives` and `jet` always runs guarded, so their orders below an
    overflow stay exact; `taylor` in the compact form needs it set. Shifted sums need no
    guard: they select their padding zeros rather than multiply them.

    **The unscaled fallback** (`taylax._fallback`, float32 past order 12):
    `fallback_check_apart`: the check whether a stretched pass is finite reads the
    pass's stacks behind an optimization barrier, so the compiler cannot fuse the pass
    into the check's reduction. `fallback_in_loop`: under `jax.vmap`, the stretched
    pass's derivatives are finished first and carried through a `while` loop of zero or
    one trips that runs the unscaled pass (updated in place), rather than a conditional
    whose common branch writes them again.

    **Fusion cuts** (`taylax._cuts`): `fusion_cut`: after this much work (equations that
    read a varying value, each weighing `min(K, unroll_max_order)`), the series still to be
    read pass through one optimization barrier, so that no fused kernel spans more; XLA:CPU
    runs a long fused chain with several outputs in time exponential in its depth. None:
    no cuts. `fusion_cut_min_work`: a pass whose whole work (equations that read a varying
    value, each weighing `min(K, unroll_max_order)` squared) stays below this is not cut:
    on XLA:CPU's default emitters a cut's stack is a kernel that recomputes what its rows
    share, and a short pass runs faster whole. None: every pass past `fusion_cut`.

    **Nested derivatives** (`taylax._derivative`): `shift_by_product_max_size`: a
    derivative's coefficients read off a shared pass are shifted by a product with a
    constant shift matrix where a coefficient has at most this many elements (XLA
    materializes the dot, so a chain of nested derivatives does not fuse into one
    expression per consumer, at n+K+1 multiplies per entry instead of one); larger ones
    (every non-empty one where it is 0) are a slice times the ratios.

    **Collapsed passes** (`taylax._collapsed`): `collapsed_jvp_max_order`: up to this order an
    elementwise chain in a collapsed pass takes its coefficients from JAX's own
    derivative rules (nested `jax.jvp` at the primal, one small fused expression per
    order); past it, from the engine's closed forms (nested jvp grows exponentially).

    **ODE steps** (`taylax.ode.integrate`): `ode_rows_max_state`: a forward solve of one
    trajectory (not `batch=True`, no event) whose state has at most this many real
    components holds each component's coefficients apart, so that a step is scalar code
    XLA:CPU can fuse into one kernel. 0 (every built-in policy): never. Set it only with
    XLA:CPU's earlier emitters (`compiler_options={"xla_cpu_use_fusion_emitters":
    False}`): there a step ran 1.05-4.3x faster, but the default emitters recompute the fused
    recurrence in time exponential in the order for some fields (docs/ODE.md, "One
    kernel per step").

    **Program size:** `budget` bounds the number of the user's equations times the order
    (counted up to `unroll_max_order`); a larger pass takes `compact()` (stacks, dots,
    loops): see `within_budget`. None disables it. Before that, an outermost pass whose
    size (counted the same way) passes `roll_past` rolls the longest runs of repeated
    equations (unrolled Python loops) back into `lax.scan`s, each that removes at least
    `roll_min_saved` equations (`taylax._rolled`), so that a loop's body is compiled
    once and no kernel spans more than one trip; the budget then applies to what is
    left (`rolls`). None in either: never.

    Examples:

        >>> import dataclasses, taylax
        >>> p = dataclasses.replace(taylax.CPU, name="no-rows", rows_max_order=0)
        >>> with taylax.emission_policy(p):
        ...     pass  # passes traced here emit stacks rather than rows
    """

    name: str
    unroll_max_order: int = 16
    loop_unroll_max_order: int = 8
    reciprocal_min_order: int = 9
    split_numerator_min_order: int | None = 17
    unroll_max_degree: int = 4
    unroll_low_degree_max_order: int = 32
    recurrence_block: int = 4
    rows_max_order: int = 16
    loop_rows_max_order: int = 4
    product_rows_max_order: int = 16
    stacked_product_rows_max_order: int = 8
    fused_concat_max_operands: int = 8
    polynomial_rows_max_order: int = 1
    nested_rowless_max_elements: int | None = 16
    stacked_output_max_order: int = 4
    selected_coefficients_max_order: int | None = 16
    selected_derivatives_min_order: int = 5
    selected_derivatives_max_order: int | None = 12
    output_rows_apart_min_order: int | None = None
    output_rows_apart_min_equations: int | None = 64
    scalar_products_as_dots: bool = False
    element_chunk: int | None = 8192
    point_chunks: bool = True
    elementwise_by_points_min_bytes: int | None = 12 << 20
    elementwise_by_points_narrow_min_bytes: int | None = 32 << 20
    elementwise_by_points_min_wide_kernels: int | None = 8
    wide_kernel_min_operands: int = 16
    chunk_points: int = 1 << 16
    chunked_min_bytes: int = 32 << 20
    chunked_min_buffers: int = 8
    high_order: int = 16
    high_order_chunk_points: int = 1 << 13
    high_order_narrow_chunk_points: int | None = 1 << 14
    high_order_min_bytes: int = 16 << 20
    chunk_max_bytes: int | None = 16 << 20
    chunked_max_order: int = 32
    mark_values: bool = True
    unmarked_max_order: int = 4
    unmarked_any_size_max_order: int = 2
    unbatched_unmarked_min_bytes: int | None = 2 << 20
    unmarked_min_bytes: int = 1 << 22
    one_kernel_max_order: int = 4
    one_kernel_of_polynomials: bool = True
    primal_once_max_order: int | None = 8
    partner_rows_unmarked_min_order: int | None = 5
    riccati_rows_unmarked_max_order: int | None = 8
    root_rows_unmarked_max_order: int | None = 12
    quotient_rows_unmarked_max_order: int | None = 8
    series_quotient_rows_unmarked_max_order: int | None = 10
    rows_unmarked_min_bytes: int | None = 1 << 15
    pair_dots_max_degree: int = 8
    pair_dots_min_work: int = 1 << 15
    row_dots_max_degree: int = 8
    row_dots_min_bytes: int = 2 << 20
    small_product: int = 1 << 14
    blocked_directions: bool = True
    blocked_min_directions: int = 64
    unrolled_block: int = 64
    unrolled_max_blocks: int = 4
    direction_block: int = 16
    fallback_check_apart: bool = False
    fallback_in_loop: bool = True
    guarded_products: bool = False
    fusion_cut: int | None = 256
    fusion_cut_min_work: int | None = 2048
    shift_by_product_max_size: int = 1024
    collapsed_jvp_max_order: int = 2
    budget: int | None = 1_500
    roll_past: int | None = 700
    roll_min_saved: int | None = 64
    ode_rows_max_state: int = 0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "name":
                if not isinstance(value, str):
                    raise TypeError(f"`name` must be a string, got {type(value).__name__}.")
            elif isinstance(value, bool) or value is None:
                continue
            elif not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"`{field.name}` must be a non-negative integer, got {value!r}; see "
                    "`help(taylax.EmissionPolicy)` for what each field means."
                )
        if self.collapsed_jvp_max_order > 2:
            raise ValueError(
                "`collapsed_jvp_max_order` must be 0, 1 or 2 (the chain rule of a collapsed "
                f"pass is written to order 2), got {self.collapsed_jvp_max_order}."
            )
        if self.recurrence_block < 1:
            raise ValueError(f"`recurrence_block` must be at least 1, got {self.recurrence_block}.")
        if self.element_chunk is not None and self.element_chunk < 1:
            raise ValueError(
                f"`element_chunk` must be a positive integer or None, got {self.element_chunk}."
            )

    def compact(self) -> EmissionPolicy:
        """This policy without the choices that multiply equations: no rows, recurrences
        unrolled only where a coefficient sums a few terms, stacked products, no
        one-kernel pass. The emitted program is then linear in the order and in the
        user's program (`within_budget`)."""
        return dataclasses.replace(
            self,
            name=f"{self.name}-compact",
            unroll_max_order=min(self.unroll_max_order, 2),
            loop_unroll_max_order=min(self.loop_unroll_max_order, 2),
            unroll_low_degree_max_order=min(self.unroll_low_degree_max_order, 2),
            rows_max_order=0,
            loop_rows_max_order=0,
            product_rows_max_order=min(self.product_rows_max_order, 2),
            stacked_product_rows_max_order=min(self.stacked_product_rows_max_order, 2),
            polynomial_rows_max_order=0,
            one_kernel_max_order=0,
            pair_dots_max_degree=0,
            row_dots_max_degree=0,
            scalar_products_as_dots=True,
            budget=None,
        )

    def rolls(self, equations: int, order: int) -> bool:
        """Whether a pass of `order` over `equations` equations first rolls its unrolled
        loops into scans: `equations * min(order, unroll_max_order) > roll_past`."""
        if self.roll_past is None or self.roll_min_saved is None:
            return False
        return self._work(equations, order) > self.roll_past

    def _work(self, equations: int, order: int) -> int:
        """A pass's size for `rolls` and `within_budget`: equations times the order,
        counted up to `unroll_max_order` (past it recurrences loop)."""
        return equations * min(max(order, 1), max(self.unroll_max_order, 1))

    def within_budget(self, equations: int, order: int) -> EmissionPolicy:
        """The policy for a pass of `order` over a program of `equations` equations:
        this one while `equations * min(order, unroll_max_order) <= budget`, else
        `compact()`. Past `unroll_max_order` recurrences loop, so the program grows by
        little more per order."""
        if self.budget is None or self._work(equations, order) <= self.budget:
            return self
        return self.compact()


# XLA:CPU: the constants measured on the 2-core CPU (docs/EMISSION.md, "CPU").
# On a JAX without the `stack` primitive (0.9) a vmapped stack is a concatenate that
# XLA:CPU writes row by row, and selected rows were faster from order 2 on every chain
# measured (docs/EMISSION.md, "Outputs beside other outputs").
CPU = EmissionPolicy(
    name="cpu", selected_derivatives_min_order=5 if _compat.HAS_STACK_PRIMITIVE else 2
)
"""The policy for XLA:CPU: cache-sized buffers, rows XLA:CPU fuses, loops that keep the state
in cache, chunks of points and blocks of directions; a long pass computes each output row
in a kernel of its own, uncut (docs/EMISSION.md, "CPU").

!!! Example

    ```python
    import dataclasses

    import taylax

    with taylax.emission_policy(taylax.CPU):  # what a CPU gets by default
        ...
    mine = dataclasses.replace(taylax.CPU, name="mine", rows_max_order=4)
    ```
"""

# GPUs: straight-line code that XLA fuses; no loop over coefficients, elements or points,
# no value marked for a buffer; products row by row and output rows in buffers of their
# own (docs/EMISSION.md, "GPU" and its "Fourth run").
GPU = EmissionPolicy(
    name="gpu",
    unroll_max_order=32,
    loop_unroll_max_order=32,
    reciprocal_min_order=33,
    split_numerator_min_order=None,
    unroll_low_degree_max_order=32,
    product_rows_max_order=32,
    stacked_product_rows_max_order=32,
    polynomial_rows_max_order=8,
    output_rows_apart_min_order=1,
    output_rows_apart_min_equations=None,
    selected_coefficients_max_order=None,
    selected_derivatives_max_order=None,
    element_chunk=None,
    point_chunks=False,
    elementwise_by_points_min_bytes=None,
    elementwise_by_points_min_wide_kernels=None,
    mark_values=False,
    primal_once_max_order=None,
    partner_rows_unmarked_min_order=None,
    riccati_rows_unmarked_max_order=None,
    root_rows_unmarked_max_order=None,
    quotient_rows_unmarked_max_order=None,
    series_quotient_rows_unmarked_max_order=None,
    one_kernel_of_polynomials=False,
    blocked_directions=False,
    fallback_check_apart=True,
    fallback_in_loop=False,
    fusion_cut_min_work=None,
    roll_past=None,
    nested_rowless_max_elements=None,
)
"""The policy for XLA:GPU (`gpu`, `cuda`, `rocm`): straight-line code that XLA fuses into few
kernels; no loop over coefficients, elements or points, no buffer marks; products as sums of
row products, and each output row computed into a buffer of its own before the stack (fused
into the stack, XLA:GPU recomputed each row's shared expressions). Whole-array calls of
elementwise functions stay whole-array passes (unmeasured as a `vmap` on a GPU). Its fusion cuts
are the CPU's `fusion_cut`, unmeasured on a GPU: a guard against kernels that grow with a
whole unrolled loop, at the price of a few more kernels in long programs. Short passes are
cut too (`fusion_cut_min_work=None`): the CPU leaves them whole because of how XLA:CPU
emits a cut, which says nothing of XLA:GPU.
It does not roll unrolled loops into scans (`roll_past=None`): that
was measured on the CPU only, and a GPU runs a scan's trips one after another, each with
its own kernel launches.

!!! Example

    ```python
    import jax
    import jax.numpy as jnp
    import taylax

    d = jax.jit(taylax.derivatives(jnp.sin, 8))
    with taylax.emission_policy(taylax.GPU):  # a GPU's program, on any machine
        d(0.3)
    ```
"""

# Any other platform (TPU, plugins): the GPU's choices, which keep no CPU-only loop.
DEFAULT = dataclasses.replace(GPU, name="default")
"""The policy for any other platform (TPU, plugins): the GPU's choices, no CPU-only loop;
not measured.

!!! Example

    ```python
    import taylax

    with taylax.emission_policy("default"):  # the same as taylax.DEFAULT
        ...
    ```
"""

_BY_PLATFORM = {"cpu": CPU, "gpu": GPU, "cuda": GPU, "rocm": GPU}
_BY_NAME = {"cpu": CPU, "gpu": GPU, "default": DEFAULT}

# The policy a user set (`emission_policy`): a JAX configuration state, so that JAX's trace
# and jit caches tell programs traced under two policies apart
# (`_compat.trace_context_state`); a context variable where JAX has none.
_STATE = _compat.trace_context_state(
    "taylax_emission_policy", "The taylax emission policy in force (taylax.emission_policy)."
)
_FALLBACK: contextvars.ContextVar[EmissionPolicy | None] = contextvars.ContextVar(
    "taylax_emission_policy", default=None
)

# The policy a pass is traced with (`pass_scope`): a plain context variable, not JAX trace
# context. A jitted sub-pass called both outside the pass and inside it would otherwise be
# traced twice, its copies compiled twice (the nested-derivative recursion's program grew
# by 1.7x: docs/DERIVATIVES.md). taylax's own caches of what a pass traces
# (`_rules._calls.jit_per_jaxpr`, `_programs`) key on `current()` themselves.
_PASS: contextvars.ContextVar[EmissionPolicy | None] = contextvars.ContextVar(
    "taylax_pass_policy", default=None
)


def _override() -> EmissionPolicy | None:
    policy = _PASS.get()
    if policy is not None:
        return policy
    return _FALLBACK.get() if _STATE is None else _STATE.value


@contextlib.contextmanager
def _overridden(policy: EmissionPolicy) -> Iterator[None]:
    if _STATE is None:
        token = _FALLBACK.set(policy)
        try:
            yield
        finally:
            _FALLBACK.reset(token)
    else:
        with _STATE(policy):
            yield


def for_platform(platform: str) -> EmissionPolicy:
    """The built-in policy of a JAX platform name ("cpu", "gpu", "cuda", "rocm", ...)."""
    return _BY_PLATFORM.get(platform.lower(), DEFAULT)


def target_platform() -> str:
    """The platform a program traced now is built for: `jax.default_device`'s where one
    is set (a device or a platform name), else the default backend's."""
    device = jax.config.jax_default_device
    if device is not None:
        return device if isinstance(device, str) else device.platform
    return jax.default_backend()


def current() -> EmissionPolicy:
    """The policy in force: the one set by `emission_policy`, else the target platform's."""
    override = _override()
    return override if override is not None else for_platform(target_platform())


def for_lowering(platforms) -> EmissionPolicy:
    """The policy for a lowering to `platforms` (a lowering rule's
    `ctx.module_context.platforms`): the one set by `emission_policy`, else the first
    platform's. Choices made at lowering (values computed once) thus follow the platform
    the program is compiled for, not the one it was traced on."""
    override = _override()
    if override is not None:
        return override
    return for_platform(platforms[0]) if platforms else current()


def _resolve(policy) -> EmissionPolicy:
    if isinstance(policy, EmissionPolicy):
        return policy
    if isinstance(policy, str):
        try:
            return _BY_NAME[policy.lower()]
        except KeyError:
            raise ValueError(
                f"Unknown emission policy {policy!r}: pass one of {sorted(_BY_NAME)} or a "
                "`taylax.EmissionPolicy`."
            ) from None
    raise TypeError(
        "`emission_policy` takes a `taylax.EmissionPolicy` or a platform's name "
        f"({sorted(_BY_NAME)}), got {type(policy).__name__}."
    )


@contextlib.contextmanager
def emission_policy(policy: EmissionPolicy | str) -> Iterator[EmissionPolicy]:
    """Emit the Taylor passes traced inside with `policy` instead of the platform's.

    **Arguments:**

    - `policy`: a `taylax.EmissionPolicy`, or the name of a built-in one: `"cpu"`,
      `"gpu"` or `"default"`.

    **Returns:** a context manager that yields the policy in force inside.

    The policy is read when a pass is traced (and, for values computed once, when it is
    lowered), and it is part of JAX's trace context, as `jax.default_device` is: a jitted
    function called inside the block is traced again, and no program built under another
    policy is reused. Results are the same under every policy, to rounding; only the
    program's shape changes.

    !!! Example

        ```python
        import jax, jax.numpy as jnp, taylax

        f = lambda t: jnp.exp(jnp.sin(t))
        with taylax.emission_policy("gpu"):  # a GPU's program, on any machine
            print(jax.make_jaxpr(jax.vmap(taylax.derivatives(f, 12)))(jnp.ones(8)))
        ```
    """
    policy = _resolve(policy)
    with _overridden(policy):
        yield policy


def for_pass(jaxpr, order: int) -> EmissionPolicy:
    """The policy of a pass of `order` over `jaxpr`: inside another pass that pass's;
    else the policy in force, within its budget for the program's size (`within_budget`,
    counting the equations of every sub-program once)."""
    if _pass.pass_order() is not None:
        # A pass inside another (a sub-program, a nested derivative) keeps the policy its
        # outermost pass chose.
        return current()
    size = sum(1 for _ in iter_equations(jaxpr))
    return current().within_budget(size, order)


def rolls_loops(jaxpr, order: int) -> bool:
    """Whether an outermost pass of `order` over `jaxpr` rolls its unrolled loops into
    scans first (`EmissionPolicy.rolls`, the equations of every sub-program counted once)."""
    return current().rolls(sum(1 for _ in iter_equations(jaxpr)), order)


@contextlib.contextmanager
def pass_scope(policy: EmissionPolicy) -> Iterator[None]:
    """Trace a pass with `policy` in force (`current()` returns it), and passes inside it
    too (`for_pass`)."""
    token = _PASS.set(policy)
    try:
        yield
    finally:
        _PASS.reset(token)
