"""The stacked series type and the Taylor arithmetic kernels (see each module).

Re-exports only: `_type` (the Series type), `_coeffs` (stacked arrays), `_rows` (rows of
stacks), `_marks` (what XLA keeps in buffers), `_products`, `_recurrences`, `_quadratic`
(equations `y' = x' g(x, y)` with `g` quadratic), `_miller` (erfcx's coefficients in its
tail), `_lines` (lines and powers),
`_identity` (facts about particular arrays, kept by identity). What a pass knows about
itself is `taylax._pass`.
"""

from ._coeffs import (
    Array as Array,
    as_real as as_real,
    binomial_numbers as binomial_numbers,
    binomials as binomials,
    check_order_for_dtype as check_order_for_dtype,
    conv_at as conv_at,
    degree_of as degree_of,
    derivative_scale as derivative_scale,
    exact_float as exact_float,
    factorials as factorials,
    fori as fori,
    forward_source as forward_source,
    fresh as fresh,
    get_coeff as get_coeff,
    inverse_factorials as inverse_factorials,
    lift as lift,
    orders as orders,
    pad_degree as pad_degree,
    pad_degree_low as pad_degree_low,
    push_window as push_window,
    real_dtype as real_dtype,
    reversed_window_source as reversed_window_source,
    row_start as row_start,
    scale_shortfall as scale_shortfall,
    self_conv_at as self_conv_at,
    set_coeff as set_coeff,
    shift as shift,
    slice_rows as slice_rows,
    times_exact as times_exact,
    times_powers as times_powers,
    zeros_series as zeros_series,
)
from ._lines import (
    along_line as along_line,
    concrete_scalar as concrete_scalar,
    exp_like_power_coeffs as exp_like_power_coeffs,
    half_integer_power as half_integer_power,
    integer_exponent_powers as integer_exponent_powers,
    line_direction as line_direction,
    mark_line as mark_line,
    powers as powers,
    real_exponent_powers as real_exponent_powers,
    times_number as times_number,
    unit_seed as unit_seed,
)
from ._marks import (
    computed_once as computed_once,
    once as once,
    opaque_one as opaque_one,
    shielded as shielded,
)
from ._miller import erfcx_coeffs as erfcx_coeffs
from ._products import (
    cauchy as cauchy,
    cauchy_bilinear as cauchy_bilinear,
    cauchy_rows as cauchy_rows,
    derivative_rows as derivative_rows,
    dot_rows as dot_rows,
    finite_part as finite_part,
    product_rows_max_order as product_rows_max_order,
    shifted_sum as shifted_sum,
    toeplitz as toeplitz,
)
from ._quadratic import Quadratic as Quadratic, quadratic_ode as quadratic_ode
from ._recurrences import (
    blocked_span as blocked_span,
    compose as compose,
    divide as divide,
    erf_inv as erf_inv,
    linear_ode as linear_ode,
    logistic as logistic,
    logistic_slope as logistic_slope,
    power as power,
    recurrence_block as recurrence_block,
    sech_squared as sech_squared,
    square_root as square_root,
    tanh as tanh,
    tanh_riccati as tanh_riccati,
    unrolled as unrolled,
)
from ._rows import (
    derivative_series as derivative_series,
    fused_concat_max_operands as fused_concat_max_operands,
    has_buffer_rows as has_buffer_rows,
    has_separate_rows as has_separate_rows,
    integrate as integrate,
    known_rows as known_rows,
    leading_rows as leading_rows,
    mark_buffer_rows as mark_buffer_rows,
    mark_separate_rows as mark_separate_rows,
    row as row,
    rows_of as rows_of,
    rows_wanted as rows_wanted,
    scaled_series as scaled_series,
    stack_primal as stack_primal,
    stack_rows as stack_rows,
    stack_rows_as as stack_rows_as,
    sum_series as sum_series,
    with_known_rows as with_known_rows,
    with_primal as with_primal,
)
from ._type import Series as Series
