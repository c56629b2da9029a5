"""The contract at the door: what a reading is, written once, for the
collector (Python's `re`) and the pipeline (Spark's Java regex) alike.

A reading's payload is checked as text, by regular expressions that mean the
same in both engines (no `\\s`, `\\d` or `\\w`, whose meaning differs; the
anchors are each engine's own), never by a JSON parser: CPython's `json`
and Spark's disagree on escaped keys, duplicate keys, lone surrogates, huge
numbers, trailing text and nesting, and each disagreement was a reading one
side kept and the other counted as lost (docs/pipeline.md, "The contract at
the door"). The checks, in order:

1. at most MAX_PAYLOAD characters;
2. a flat JSON object: keys of A-Z a-z 0-9 _, values strings without
   escapes or control characters, numbers, true, false or null (so nothing
   nests, and no text needs decoding to be compared);
3. each field of FIELDS at most once (a missing required one, or a value
   outside its limits, is a problem); every problem is named;
4. the topic is `<prefix>/<d>/telemetry`: the device is the one the
   broker let publish there, never only what the payload says.

The limits are what everything downstream holds: `d` is a safe partition
value (a directory name, never `__HIVE_DEFAULT_PARTITION__`), `b` fits an
int, `s`, `u`, `w` fit a bigint with room for `last - first + 1`, `t` is a
finite double.

    problems(text, topic) -> [reason, ...]    (empty: a reading)
    spark_ok(payload, topic), spark_problems(payload, topic)
                                              (the same, as Spark columns)
"""

import re
import zlib

MAX_PAYLOAD = 1024            # characters
DEVICE_MAX = 64
_WS = "[ \\t\\n\\r]*"
_STR = '"[^"\\\\\\x00-\\x1f]*"'
_NUM = "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_VAL = "(?:%s|%s|true|false|null)" % (_STR, _NUM)
_MEMBER = '"[A-Za-z0-9_]{1,32}"' + _WS + ":" + _WS + _VAL
FLAT_OBJECT = (_WS + "\\{" + _WS + "(?:" + _MEMBER + "(?:" + _WS + "," + _WS
               + _MEMBER + ")*)?" + _WS + "\\}" + _WS)

# (key, required, value pattern, what a value must be). Each limit is in
# the pattern (digits, not a number compared): b below 10^9 fits an int; s,
# u, w below 10^16 fit a bigint with room for last - first + 1; t, at most
# 9 digits before the point and a 2-digit exponent, is a finite double.
# An optional field may also be null.
FIELDS = (
    ("d", True, '"[A-Za-z0-9][A-Za-z0-9_.-]{0,%d}"' % (DEVICE_MAX - 1),
     "a device id (1 to %d of A-Z a-z 0-9 _ . -, the first a letter or digit)"
     % DEVICE_MAX),
    ("b", True, "(?:0|[1-9][0-9]{0,8})", "an integer from 0 to 999999999"),
    ("s", True, "(?:0|[1-9][0-9]{0,15})", "an integer from 0 to 9999999999999999"),
    ("q", True, "[012]", "0, 1 or 2"),
    ("t", False, "-?(?:0|[1-9][0-9]{0,8})(?:\\.[0-9]{1,17})?(?:[eE][+-]?[0-9]{1,2})?",
     "a finite number (at most 9 digits before the point and "
     "an exponent of at most 2 digits), or null"),
    ("u", False, "(?:0|[1-9][0-9]{0,15})", "an integer from 0 to 9999999999999999, or null"),
    ("w", False, "(?:0|[1-9][0-9]{0,15})", "an integer from 0 to 9999999999999999, or null"),
)

R_TOO_LONG = "payload is longer than %d characters" % MAX_PAYLOAD
R_NOT_FLAT = ("payload is not a flat JSON object (keys of A-Z a-z 0-9 _; values "
              "strings without escapes, numbers, true, false or null)")
R_SPOOFED = ("topic is not <prefix>/<d>/telemetry: the payload names another "
             "device than the topic the broker authorised (spoofed)")
R_NOT_UTF8 = "payload is not valid UTF-8"   # the collector's only: Spark holds text


def r_missing(key):
    return "missing key " + key


def r_twice(key):
    return "key %s given more than once" % key


def r_bad(key, what):
    return "%s is not %s" % (key, what)


def member_pattern(key):
    """A member `"key": value`, the value in group 1. Once the payload is a
    flat object, `[{,]` and a quote start a key, never a string's inside
    (a string holds no quote)."""
    return "[{,]" + _WS + '"' + key + '"' + _WS + ":" + _WS + "(" + _VAL + ")"


def _value_pattern(required, pattern):
    return pattern if required else "(?:%s|null)" % pattern


def _canonical():
    """The board's own compact form (docs/telemetry.md), keys in FIELDS'
    order, d in group 1: a payload it matches passes every check of the
    slow path but the topic's, so it is only a shortcut for the common
    case (test_the_contract_cases_on_the_collectors_side)."""
    out = "\\{"
    for i, (key, required, pattern, _what) in enumerate(FIELDS):
        value = _value_pattern(required, pattern)
        member = '"%s":' % key + ("(%s)" % value if key == "d" else value)
        if i:
            member = "," + member
        out += member if required else "(?:%s)?" % member
    return out + "\\}"


CANONICAL = _canonical()
# Changes with any limit: what was checked under another contract (the
# batch's compacted hours) is checked again.
VERSION = "%08x" % zlib.crc32(repr((MAX_PAYLOAD, FLAT_OBJECT, FIELDS, R_SPOOFED)).encode())
_CANON_RE = re.compile(CANONICAL)
_FLAT_RE = re.compile(FLAT_OBJECT)
_MEMBER_RES = [re.compile(member_pattern(f[0])) for f in FIELDS]
_VALUE_RES = [re.compile(_value_pattern(f[1], f[2])) for f in FIELDS]


def _topic_names(topic, device):
    return topic.endswith("/" + device + "/telemetry")


def problems(text, topic, fast=True):
    """The reasons `text` (a payload) on `topic` is not a reading; [] when
    it is one. fast=False skips the shortcut (tests)."""
    topic = topic or ""
    if fast:
        m = _CANON_RE.fullmatch(text)
        if m is not None and _topic_names(topic, m.group(1)[1:-1]):
            return []
    if len(text) > MAX_PAYLOAD:
        return [R_TOO_LONG]
    if _FLAT_RE.fullmatch(text) is None:
        return [R_NOT_FLAT]
    out = []
    device = None
    for (key, required, _p, what), mre, vre in zip(FIELDS, _MEMBER_RES, _VALUE_RES):
        vals = mre.findall(text)
        if not vals:
            if required:
                out.append(r_missing(key))
        elif len(vals) > 1:
            out.append(r_twice(key))
        elif vre.fullmatch(vals[0]) is None:
            out.append(r_bad(key, what))
        elif key == "d":
            device = vals[0][1:-1]
    if device is not None and not _topic_names(topic, device):
        out.append(R_SPOOFED)
    return out


# -- the same in Spark --------------------------------------------------------

def _java(pattern):
    """A whole-text match in Java's regex (rlike finds): its own anchors;
    Java's `$` would also match before a final line terminator."""
    return "^(?:" + pattern + ")\\z"


def _spark_topic_names(topic, device):
    from pyspark.sql import functions as F
    return F.coalesce(topic.endswith(F.concat(F.lit("/"), device, F.lit("/telemetry"))),
                      F.lit(False))


def spark_ok(payload, topic):
    """True where problems() would give none (a column): the canonical form
    first (one regex: its d, quoted, is never empty when it matched), the
    checks only for the rest."""
    from pyspark.sql import functions as F
    canon = F.regexp_extract(payload, _java(CANONICAL), 1)
    return (F.when(canon != "", _spark_topic_names(topic, F.regexp_replace(canon, '^"|"$', "")))
            .otherwise(F.size(spark_problems(payload, topic)) == 0))


def spark_problems(payload, topic):
    """The problems (array<string>, empty for a reading) of each row, as
    problems() gives them."""
    from pyspark.sql import functions as F
    per = []
    device = None
    for key, required, pattern, what in FIELDS:
        vals = F.regexp_extract_all(payload, F.lit(member_pattern(key)), 1)
        v = F.try_element_at(vals, F.lit(1))
        per.append(F.when(F.size(vals) == 0, F.lit(r_missing(key) if required else None))
                   .when(F.size(vals) > 1, F.lit(r_twice(key)))
                   .when(~v.rlike(_java(_value_pattern(required, pattern))),
                         F.lit(r_bad(key, what))))
        if key == "d":
            device = F.when((F.size(vals) == 1) & v.rlike(_java(pattern)),
                            F.regexp_replace(v, '^"|"$', ""))
    per.append(F.when(device.isNotNull() & ~_spark_topic_names(topic, device),
                      F.lit(R_SPOOFED)))
    return (F.when(F.length(payload) > MAX_PAYLOAD, F.array(F.lit(R_TOO_LONG)))
            .when(~payload.rlike(_java(FLAT_OBJECT)), F.array(F.lit(R_NOT_FLAT)))
            .otherwise(F.array_compact(F.array(*per))))
