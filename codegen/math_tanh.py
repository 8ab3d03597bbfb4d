"""float32 tanh on AVX-512: a polynomial per interval of |x|, its coefficients read from
32-entry tables by permutes (``math_table``), no division.

The interval is |x|'s exponent and its two leading mantissa bits: ``index = max((bits(|x|)
>> 21) - 489, 0)`` gives four intervals a binade from 0.046875 to [8, 10) (entry 31; |x| is
clamped to 9.5 before, where tanh rounds to 1), and entry 0 everything below 0.046875. In
each, tanh(|x|) = c0 + y (c1 + y (c2 + y (c3 + y (c4 + y c5)))) with y = |x| - center,
exact (center and |x| in one interval); six multiply-adds' worth of work (five and the
subtraction) and seven permutes, against the exponential's sixteen operations and the
division of ``math_exp._tanh_float32`` (the code on hosts without AVX-512's permutes).

The centers are float32 numbers near each interval's middle whose tanh lies within 0.02
ulp of its float32 rounding c0, so the table's own rounding adds next to nothing to the
final multiply-add's; the other coefficients are minimax with float32 coefficients, of
the least degree within 0.02 ulp of tanh (0.22 in the widest intervals, [2, 2.5) and [4,
5), degree 5), zeros above it; entry 0 is odd, x + c3 x^3 + c5 x^5. Measured on every
positive float32 (``docs/experiments/float32_polynomials/fit.py tanh_tables`` prints the
tables; tanh is odd, the sign is restored after): within 0.992 ulp of the exact result (at
0.0308: entry 0, where c1 + ... rounds next to 1 before its product with y), against 1.08
for the exponential's code. NumPy's own (SVML's, the same shape) is within 1.37.

The whole polynomial, index and reads included, is one call of a scalar function whose
16-lane variant the loop vectorizer calls and ``codegen.llvm`` inlines after it
(``math_table.vectorizable_function``), and the tables' constants are formatted once a
process (``math_table``): a read of its own per table (a function pair each) made the
first call of a chain of ten ops with two tanh cost ~8 ms more CPU than the exponential's
code (48 against 39 ms, fresh processes, median of 9, load 20), one function ~2 ms
(``counted_loop.instructions_from`` counts its body in the loop's size, so the loop is
still run two vectors an iteration).

Speed (issue 16; 1024x1024 on [-10, 10], one thread, CPU time, the least of interleaved
rounds in one process, load 11): 0.122 ms against 0.176 for the exponential's code and
NumPy's 0.182.

>>> from llvmlite import ir
>>> module = ir.Module()
>>> kernel = ir.Function(module, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "k")
>>> builder = ir.IRBuilder(kernel.append_basic_block())
>>> _ = builder.ret(tanh_tables(builder, kernel.args[0]))
>>> sorted(function.name for function in module.functions if "tanh" in function.name)
['tracejit_tanh_tables_f32', 'tracejit_vv_tanh_tables_f32_n16']
"""

from __future__ import annotations

from llvmlite import ir

from .math_core import Float, fma
from .math_table import permutes, read_float32, vectorizable_function

_BASE = 489  # (bits >> 21) of 0.046875, less one: entry 1 starts there
_SHIFT = 21  # exponent and two mantissa bits: four intervals a binade

_CENTERS = (
    0.0, 0.05063138157129288, 0.059256911277770996, 0.07040414959192276, 0.08695149421691895,
    0.10204260796308517, 0.11714933812618256, 0.13856148719787598, 0.17162494361400604,
    0.20693521201610565, 0.23546990752220154, 0.28453686833381653, 0.3403257131576538,
    0.40163105726242065, 0.46793365478515625, 0.5713537335395813, 0.6796519756317139,
    0.7988895177841187, 0.9461038708686829, 1.1201105117797852, 1.3778250217437744,
    1.6366639137268066, 1.8676118850708008, 2.2609283924102783, 2.769392490386963,
    3.2916927337646484, 3.7423760890960693, 4.435654163360596, 5.5805745124816895,
    6.492435455322266, 7.513049125671387, 8.664371490478516)
# c0, c1, ..., c5 by entry
_COEFFICIENTS = (
    (
        0.0, 0.05058816075325012, 0.05918765068054199, 0.07028805464506149,
        0.08673302084207535, 0.1016898974776268, 0.11661634594202042, 0.1376814842224121,
        0.16995948553085327, 0.20403113961219788, 0.23121234774589539, 0.2770988345146179,
        0.32776814699172974, 0.38134369254112244, 0.4365282356739044, 0.5163527727127075,
        0.5912930965423584, 0.6634154915809631, 0.7380141019821167, 0.8076073527336121,
        0.8804633021354675, 0.9270047545433044, 0.9533771276473999, 0.9784960746765137,
        0.9921681880950928, 0.997237503528595, 0.9988774657249451, 0.9997193217277527,
        0.9999715685844421, 0.9999954104423523, 0.9999994039535522, 0.9999999403953552),
    (
        1.0, 0.9974408149719238, 0.9964967966079712, 0.995059609413147, 0.9924774169921875,
        0.9896591901779175, 0.9864006042480469, 0.981043815612793, 0.9711138010025024,
        0.9583712816238403, 0.9465408325195312, 0.9232162237167358, 0.892568051815033,
        0.8545770049095154, 0.8094431161880493, 0.7333798408508301, 0.6503724455833435,
        0.5598798990249634, 0.45533517003059387, 0.3477703928947449, 0.22478435933589935,
        0.14066217839717865, 0.09107205271720886, 0.04254545643925667, 0.015602325089275837,
        0.005517395678907633, 0.002243806840851903, 0.0005612146342173219,
        5.687617522198707e-05, 9.179198059428018e-06, 1.189151930702792e-06,
        1.1793812859650643e-07),
    (
        0.0, -0.05045853182673454, -0.05897989496588707, -0.06993895024061203,
        -0.08607970923185349, -0.10063616931438446, -0.11502749472856522, -0.13507166504859924,
        -0.16505002975463867, -0.195537731051445, -0.2188519835472107, -0.2558213174343109,
        -0.2925556004047394, -0.32588768005371094, -0.35334470868110657, -0.37868234515190125,
        -0.3845607340335846, -0.3714330196380615, -0.3360438048839569, -0.2808637022972107,
        -0.1979154795408249, -0.130394846200943, -0.08682607859373093, -0.041629355400800705,
        -0.015479275025427341, -0.0055019003339111805, -0.0022411278914660215,
        -0.0005606032791547477, -5.68192481296137e-05, -9.167913958663121e-06,
        -1.1882433454957209e-06, -1.193544107991329e-07),
    (
        -0.33333322405815125, -0.327973335981369, -0.32713884115219116, -0.3271414637565613,
        -0.3241126537322998, -0.3201492428779602, -0.3149835169315338, -0.30843132734298706,
        -0.2957817316055298, -0.279447466135025, -0.2647949457168579, -0.23679214715957642,
        -0.20162047445774078, -0.16060437262058258, -0.11560776084661484, -0.04894838109612465,
        0.010622138157486916, 0.05977689474821091, 0.09624174237251282, 0.11089373379945755,
        0.09933294355869293, 0.07399296760559082, 0.052420489490032196, 0.026551123708486557,
        0.010154066607356071, 0.0036443446297198534, 0.0014909839956089854,
        0.0003754590288735926, 3.754784120246768e-05, 6.115780706750229e-06,
        8.442261787422467e-07, 8.996072153877321e-08),
    (
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.08888083696365356, 0.10579149425029755,
        0.12472253292798996, 0.13518871366977692, 0.1495991200208664, 0.16414791345596313,
        0.17026229202747345, 0.1681332290172577, 0.1512499451637268, 0.12187499552965164,
        0.08417962491512299, 0.041050348430871964, 0.004445469006896019, -0.021251440048217773,
        -0.02504795603454113, -0.02102009393274784, -0.012168160639703274,
        -0.004962095525115728, -0.0018178124446421862, -0.0007504181703552604,
        -0.00019411722314544022, -1.9600323867052794e-05, -3.2037617074820446e-06,
        -4.297952500564861e-07, -4.035412715097664e-08),
    (
        0.13316817581653595, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, -0.04184640944004059, -0.06544847041368484, -0.061596620827913284,
        -0.05522359162569046, -0.03197517991065979, -0.009557528421282768,
        0.0014089720789343119, 0.004597168881446123, 0.003976297099143267,
        0.0019159645307809114, 0.0007714013918302953, 0.0002929159381892532,
        6.860702706035227e-05, 9.32688362809131e-06, 1.2617960010175011e-06, 0.0, 0.0),
)


# None: the tables where the host permutes float32 tables (AVX-512), else
# ``math_exp._tanh_float32``; tests set it to run both.
USE_TABLES = None


def use_tables(x):
    """Read the tables for ``tanh(x)``? A constant argument keeps the exponential's code
    (LLVM would fold the index into the tables' scalar functions, as ``math_pow`` says)."""
    use = USE_TABLES if USE_TABLES is not None else permutes()
    return use and not isinstance(x, ir.Constant)


def tanh_tables(builder, magnitude):
    """tanh of a float32 |x| clamped to 9.5, or NaN (its index reads some entry, its y is
    NaN, and so is the result)."""
    return vectorizable_function(builder, "tanh_tables_f32", magnitude, magnitude.type,
                                 _polynomial, [16])


def _polynomial(builder, magnitude):
    """The tables' polynomial at ``magnitude``, scalar or a vector (read at once)."""
    f = Float(magnitude.type)
    bits = builder.bitcast(magnitude, f.int)
    index = builder.sub(builder.lshr(bits, f.iconst(_SHIFT)), f.iconst(_BASE))
    index = builder.select(builder.icmp_signed("<", index, f.iconst(0)), f.iconst(0), index)
    center = read_float32(builder, _CENTERS, index)
    y = builder.fsub(magnitude, center)
    terms = [read_float32(builder, column, index) for column in _COEFFICIENTS]
    result = terms[-1]
    for term in reversed(terms[:-1]):
        result = fma(builder, result, y, term)
    return result

