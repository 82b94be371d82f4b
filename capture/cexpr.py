"""Evaluate the integer constant expressions that event formats print.

The kernel expands flag macros into C text such as
`(( gfp_t)((((1UL))) << (10)))` inside `__print_flags` tables. Only that
subset is accepted: integer literals with U/L suffixes, casts to integer type
names, parentheses, and the operators | ^ & << >> + - * ~. Anything else
(a symbol, a function call, a string) is refused, so no text from a format
file is ever executed. Arithmetic is unsigned 64-bit, like `unsigned long`.
"""
import re

from kmemscope.common.errors import CaptureError

MASK64 = (1 << 64) - 1

# Words that may appear inside a cast. `__force` is a sparse annotation that
# most configs expand to nothing; some formats keep it.
TYPE_WORDS = frozenset("""
    unsigned signed long int short char gfp_t __force size_t
    u8 u16 u32 u64 s8 s16 s32 s64 __u8 __u16 __u32 __u64 __s8 __s16 __s32 __s64
""".split())

_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|\d+)[uUlL]*|([A-Za-z_]\w*)|(<<|>>|[()|^&~+\-*]))")


def tokenize(text):
    """Split `text` into ('num', int), ('name', str) and ('op', str) tokens."""
    tokens: list = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if not m:
            raise CaptureError("unsupported expression %r at %r" % (text, text[pos:pos + 12]))
        number, name, op = m.groups()
        if number is not None:
            tokens.append(("num", int(number, 0) if not _is_octal(number) else int(number, 8)))
        elif name is not None:
            tokens.append(("name", name))
        else:
            tokens.append(("op", op))
        pos = m.end()
    return tokens


def _is_octal(number):
    return len(number) > 1 and number[0] == "0" and number[1] not in "xX"


class _Parser:
    """Recursive descent over C precedence: | above ^ above & above shifts above + - above *."""

    def __init__(self, text):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    def fail(self, why):
        raise CaptureError("cannot evaluate %r: %s" % (self.text, why))

    def peek(self, offset=0):
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else (None, None)

    def take_op(self, *ops):
        kind, value = self.peek()
        if kind == "op" and value in ops:
            self.i += 1
            return value
        return None

    def parse(self):
        value = self.binary(0)
        if self.i != len(self.tokens):
            self.fail("unexpected %r" % (self.peek()[1],))
        return value

    LEVELS = (("|",), ("^",), ("&",), ("<<", ">>"), ("+", "-"), ("*",))

    def binary(self, level):
        if level == len(self.LEVELS):
            return self.unary()
        value = self.binary(level + 1)
        while True:
            op = self.take_op(*self.LEVELS[level])
            if op is None:
                return value
            rhs = self.binary(level + 1)
            value = self.apply(op, value, rhs)

    def apply(self, op, a, b):
        if op in ("<<", ">>") and not 0 <= b < 64:
            self.fail("shift by %d" % b)
        result = {
            "|": lambda: a | b, "^": lambda: a ^ b, "&": lambda: a & b,
            "<<": lambda: a << b, ">>": lambda: a >> b,
            "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
        }[op]()
        return result & MASK64

    def unary(self):
        op = self.take_op("~", "-", "+")
        if op is not None:
            value = self.unary()
            return {"~": ~value, "-": -value, "+": value}[op] & MASK64
        if self.is_cast():
            return self.unary()  # integer casts do not change a constant that fits
        return self.primary()

    def is_cast(self):
        """At '(' followed only by type words and ')': consume the cast."""
        if self.peek() != ("op", "("):
            return False
        j = 1
        while self.peek(j)[0] == "name":
            if self.peek(j)[1] not in TYPE_WORDS:
                self.fail("unknown symbol %r" % self.peek(j)[1])
            j += 1
        if j == 1 or self.peek(j) != ("op", ")"):
            return False
        self.i += j + 1
        return True

    def primary(self):
        kind, value = self.peek()
        if kind == "num":
            self.i += 1
            return value & MASK64
        if kind == "name":
            self.fail("unknown symbol %r" % value)
        if self.take_op("("):
            value = self.binary(0)
            if not self.take_op(")"):
                self.fail("missing ')'")
            return value
        self.fail("unexpected %r" % (value,))


def evaluate(text):
    """Value of the constant expression `text` as an unsigned 64-bit int."""
    return _Parser(text).parse()
